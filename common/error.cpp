#include "common/error.h"

#include <cstring>

namespace titan::detail {

void throw_error(ErrorKind kind, const char* file, int line, const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  std::string where = std::string(base ? base + 1 : file) + ":" + std::to_string(line);
  throw Error(kind, where, msg);
}

}  // namespace titan::detail
