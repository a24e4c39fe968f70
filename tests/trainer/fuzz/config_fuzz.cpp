// libFuzzer target: the TOML config reader and the --section.key overrides (trainer/config).
// Any input must end in a JobConfig or a titan::Error; another exception, a crash or a
// sanitizer report is a finding. Built and run by launch/fuzz.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "common/error.h"
#include "trainer/config/config_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    titan::JobConfig cfg;
    titan::apply_toml(cfg, text, "fuzz.toml");
    titan::validate(cfg);
    (void)titan::config_to_toml(cfg);
  } catch (const titan::Error&) {
  }
  // The same bytes as override lines `section.key=value`, one config for all of them.
  titan::JobConfig cfg;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    try {
      titan::apply_override(cfg, line.substr(0, eq), line.substr(eq + 1));
    } catch (const titan::Error&) {
    }
  }
  return 0;
}
