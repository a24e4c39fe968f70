#include "common/collective_mode.h"

#include "common/error.h"

namespace titan {

const char* collective_mode_name(CollectiveMode m) {
  return m == CollectiveMode::kFused ? "fused" : "separate";
}

CollectiveMode parse_collective_mode(const std::string& s) {
  if (s == "fused") return CollectiveMode::kFused;
  if (s == "separate") return CollectiveMode::kSeparate;
  TITAN_CONFIG_FAIL("unknown collective_mode '", s, "' (valid: fused separate)");
}

}  // namespace titan
