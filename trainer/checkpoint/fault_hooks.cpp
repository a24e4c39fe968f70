#include "trainer/checkpoint/fault_hooks.h"

#include <cstdlib>
#include <string>

namespace titan {

int64_t kill_after_for(int64_t step, int rank, size_t pieces) {
  const char* v = std::getenv("TITAN_CHECKPOINT_FAULT");
  if (!v || rank != 0) return -1;
  const std::string s(v), prefix = "kill_during_save:";
  if (s.rfind(prefix, 0) != 0 || std::stoll(s.substr(prefix.size())) != step) return -1;
  return static_cast<int64_t>(pieces / 2);
}

int64_t exit_after_step() {
  const char* v = std::getenv("TITAN_CHECKPOINT_FAULT");
  const std::string prefix = "exit_after_step:";
  if (!v || std::string(v).rfind(prefix, 0) != 0) return -1;
  return std::stoll(std::string(v).substr(prefix.size()));
}

}  // namespace titan
