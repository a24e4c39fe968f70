// titan::Error and TITAN_CHECK: the one error type every layer throws. It lives in the
// lowest layer (common/) so that every other folder may include it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace titan {

// kind separates mistakes in what the user asked for (config) from failures while running.
enum class ErrorKind { kConfig, kRuntime };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& where, const std::string& message)
      : std::runtime_error(message), kind_(kind), where_(where) {}
  ErrorKind kind() const { return kind_; }
  const std::string& where() const { return where_; }

 private:
  ErrorKind kind_;
  std::string where_;
};

namespace detail {
[[noreturn]] void throw_error(ErrorKind kind, const char* file, int line, const std::string& msg);

inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  append_all(os, args...);
  return os.str();
}
}  // namespace detail

}  // namespace titan

// TITAN_CHECK(cond, "message ", value, ...) throws a runtime titan::Error with file:line.
#define TITAN_CHECK(cond, ...)                                                      \
  do {                                                                             \
    if (!(cond))                                                                   \
      ::titan::detail::throw_error(::titan::ErrorKind::kRuntime, __FILE__, __LINE__, \
                                   ::titan::detail::concat(__VA_ARGS__));          \
  } while (0)

// TITAN_CONFIG_CHECK: the same for mistakes in user input (config, flags, layouts).
#define TITAN_CONFIG_CHECK(cond, ...)                                               \
  do {                                                                             \
    if (!(cond))                                                                   \
      ::titan::detail::throw_error(::titan::ErrorKind::kConfig, __FILE__, __LINE__, \
                                   ::titan::detail::concat(__VA_ARGS__));          \
  } while (0)

#define TITAN_FAIL(...) TITAN_CHECK(false, __VA_ARGS__)
#define TITAN_CONFIG_FAIL(...) TITAN_CONFIG_CHECK(false, __VA_ARGS__)
