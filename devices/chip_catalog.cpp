// The chip catalog: the data files of devices/chips/ (listed in catalog.toml), loaded once per
// folder, and the lookup by name with an optional user chip file on top.
#include "devices/chip_catalog.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <toml++/toml.h>

#include "common/error.h"
#include "devices/chip_file.h"

namespace titan::devices {
namespace {

struct Catalog {
  std::vector<std::string> names;  // catalog.toml order
  std::vector<ChipSpec> chips;     // same order
};

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// catalog.toml: `chips = ["tpu-v4", ...]`, each <name>.toml in the same folder. Every other
// chip file there must be listed (templates start with '_'), so none is silently ignored.
Catalog load_catalog(const std::string& dir) {
  const std::string index = dir + "/catalog.toml";
  TITAN_CONFIG_CHECK(std::filesystem::is_regular_file(index), "chip catalog '", index,
                     "' not found (set TITAN_CHIP_DIR to the folder of the chip data files)");
  toml::table tbl;
  try {
    tbl = toml::parse_file(index);
  } catch (const toml::parse_error& e) {
    TITAN_CONFIG_FAIL(index, ":", e.source().begin.line, ": ", e.description());
  }
  const toml::array* list = tbl.get_as<toml::array>("chips");
  TITAN_CONFIG_CHECK(list != nullptr, index, ": needs `chips = [\"name\", ...]`");
  Catalog c;
  for (const toml::node& n : *list) {
    auto name = n.value<std::string>();
    TITAN_CONFIG_CHECK(name.has_value(), index, ":", n.source().begin.line,
                       ": chip names must be strings");
    ChipSpec spec = read_chip_file(dir + "/" + *name + ".toml", dir);
    TITAN_CONFIG_CHECK(spec.name == *name, spec.file, ": name '", spec.name,
                       "' differs from its catalog entry '", *name, "'");
    check_chip(spec);
    c.names.push_back(*name);
    c.chips.push_back(std::move(spec));
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string stem = entry.path().stem().string();
    if (entry.path().extension() != ".toml" || stem == "catalog" || stem[0] == '_') continue;
    TITAN_CONFIG_CHECK(std::find(c.names.begin(), c.names.end(), stem) != c.names.end(),
                       entry.path().string(), " is not listed in ", index);
  }
  return c;
}

const Catalog& catalog() {
  static std::mutex mu;
  static std::map<std::string, Catalog> loaded;  // per folder (TITAN_CHIP_DIR may change)
  const std::string dir = chip_dir();
  std::lock_guard<std::mutex> lock(mu);
  auto it = loaded.find(dir);
  if (it == loaded.end()) it = loaded.emplace(dir, load_catalog(dir)).first;
  return it->second;
}

}  // namespace

std::string chip_dir() {
  if (const char* d = std::getenv("TITAN_CHIP_DIR"); d && *d) return d;
  return std::string(TITAN_SOURCE_DIR) + "/devices/chips";
}

const std::vector<std::string>& chip_names() { return catalog().names; }

const ChipSpec& catalog_chip(const std::string& name) {
  const Catalog& c = catalog();
  for (const ChipSpec& s : c.chips)
    if (s.name == name) return s;
  std::string valid;
  for (const std::string& n : c.names) valid += (valid.empty() ? "" : " ") + n;
  TITAN_CONFIG_FAIL("unknown device '", name, "'; valid devices: ", valid);
}

ChipSpec find_chip(const std::string& name, const CpuCalibration* cpu,
                   const std::string& chip_file) {
  const std::string key = lower(trim(name));
  if (!chip_file.empty()) {
    ChipSpec user = read_chip_file(chip_file, chip_dir());
    TITAN_CONFIG_CHECK(user.name != "cpu", chip_file,
                       ": the cpu device takes its figures from its calibration file");
    check_chip(user);
    if (lower(user.name) == key) return user;
    TITAN_CONFIG_CHECK(std::find(chip_names().begin(), chip_names().end(), key) !=
                           chip_names().end(),
                       "unknown device '", name, "'; the chip file ", chip_file, " defines '",
                       user.name, "'");
  }
  if (key == "cpu") {
    TITAN_CONFIG_CHECK(cpu != nullptr,
                       "device 'cpu' takes its constants from a calibration file; none was "
                       "given (run the calibration command and pass its output)");
    return cpu_chip(*cpu);
  }
  return catalog_chip(key);
}

}  // namespace titan::devices
