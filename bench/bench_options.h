// Command-line numbers for the benchmark tools: a bad value or an unknown option ends the tool
// with a message naming the option (BenchUsageError), instead of std::stoi's uncaught
// exception or a benchmark run with the option silently ignored.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace titan::bench {

struct BenchUsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A whole number in [lo, hi].
inline long parse_whole(const std::string& option, const std::string& text, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    throw BenchUsageError(option + " needs a whole number from " + std::to_string(lo) + " to " +
                          std::to_string(hi) + ", got \"" + text + "\"");
  return v;
}

// A number above zero.
inline double parse_positive(const std::string& option, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !(v > 0))
    throw BenchUsageError(option + " needs a number above 0, got \"" + text + "\"");
  return v;
}

}  // namespace titan::bench
