#include "trainer/config/config_folders.h"

#include <filesystem>
#include <system_error>

#include "common/error.h"

namespace titan {

void create_folder_for(const std::string& key, const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  TITAN_CONFIG_CHECK(!ec, key, " ", path, ": cannot be created (", ec.message(), ")");
}

}  // namespace titan
