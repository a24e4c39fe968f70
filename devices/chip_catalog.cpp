// The chip catalog: the data files of devices/chips/ (listed in catalog.toml), loaded once per
// folder, and the lookup by name with an optional user chip file on top.
#include "devices/chip_catalog.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
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

namespace {

// Doubles by their bits, so that equal chips behave the same even where a figure is -0.0 or
// NaN (1 / -0.0 is -inf; NaN equals no value, and would only make two copies unequal).
bool same(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
template <class T>
bool same(const T& a, const T& b) {
  return a == b;
}
bool same(const std::map<std::string, double>& a, const std::map<std::string, double>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const auto& x, const auto& y) { return x.first == y.first && same(x.second, y.second); });
}

}  // namespace

// Every field, the most telling first (most chips differ by name).
bool operator==(const ChipSpec& a, const ChipSpec& b) {
  static_assert(sizeof(ChipSpec) == 736,
                "ChipSpec changed: compare the new fields in operator== (chip_catalog.cpp), then update its size");
  return same(a.name, b.name) && same(a.description, b.description) && same(a.family, b.family) &&
         same(a.peak_bf16_flops, b.peak_bf16_flops) && same(a.peak_clock_hz, b.peak_clock_hz) &&
         same(a.sustained_clock_hz, b.sustained_clock_hz) &&
         same(a.sustained_clock_from, b.sustained_clock_from) &&
         same(a.borrowed_clock_ratio, b.borrowed_clock_ratio) &&
         same(a.fitted_clock_share, b.fitted_clock_share) && same(a.hbm_bytes, b.hbm_bytes) &&
         same(a.hbm_bytes_per_s, b.hbm_bytes_per_s) && same(a.hbm_efficiency, b.hbm_efficiency) &&
         same(a.host_link_bytes_per_s, b.host_link_bytes_per_s) && same(a.fast_fabric, b.fast_fabric) &&
         same(a.link_bytes_per_s, b.link_bytes_per_s) && same(a.links, b.links) &&
         same(a.fast_domain_chips, b.fast_domain_chips) && same(a.max_slice_chips, b.max_slice_chips) &&
         same(a.hop_latency_s, b.hop_latency_s) && same(a.torus_dims, b.torus_dims) &&
         same(a.wraparound, b.wraparound) && same(a.wrap_edge, b.wrap_edge) &&
         same(a.scale_out_fabric, b.scale_out_fabric) &&
         same(a.scale_out_bytes_per_s, b.scale_out_bytes_per_s) &&
         same(a.scale_out_latency_s, b.scale_out_latency_s) && same(a.link_efficiency, b.link_efficiency) &&
         same(a.scale_out_efficiency, b.scale_out_efficiency) && same(a.matmul_tile, b.matmul_tile) &&
         same(a.matmul_tile_k, b.matmul_tile_k) && same(a.matmul_units, b.matmul_units) &&
         same(a.attention_peak_fraction, b.attention_peak_fraction) &&
         same(a.vector_peak_fraction, b.vector_peak_fraction) && same(a.comm_units, b.comm_units) &&
         same(a.comm_memory_traffic, b.comm_memory_traffic) &&
         same(a.eager_host_per_op_s, b.eager_host_per_op_s) && same(a.eager_launch_s, b.eager_launch_s) &&
         same(a.defer_host_per_op_s, b.defer_host_per_op_s) && same(a.defer_launch_s, b.defer_launch_s) &&
         same(a.compiled_host_per_op_s, b.compiled_host_per_op_s) &&
         same(a.compiled_launch_s, b.compiled_launch_s) &&
         same(a.separate_collective_launch_s, b.separate_collective_launch_s) &&
         same(a.compiled_fuses_matmul_epilogue, b.compiled_fuses_matmul_epilogue) &&
         same(a.compiled_covers_step, b.compiled_covers_step) &&
         same(a.cpu_op_overhead_s, b.cpu_op_overhead_s) &&
         same(a.cpu_view_overhead_s, b.cpu_view_overhead_s) && same(a.fused_attention, b.fused_attention) &&
         same(a.host_fused_kernels, b.host_fused_kernels) &&
         same(a.matmul_rate_measured, b.matmul_rate_measured) && same(a.kernel_rates, b.kernel_rates) &&
         same(a.cache_bytes, b.cache_bytes) && same(a.cache_bytes_per_s, b.cache_bytes_per_s) &&
         same(a.serial_kernels, b.serial_kernels) && same(a.matmul_k_overhead, b.matmul_k_overhead) &&
         same(a.tdp_w, b.tdp_w) && same(a.idle_w, b.idle_w) && same(a.host_w_per_chip, b.host_w_per_chip) &&
         same(a.network_w_per_chip, b.network_w_per_chip) && same(a.chip_mtbf_s, b.chip_mtbf_s) &&
         same(a.host_mtbf_s, b.host_mtbf_s) && same(a.link_mtbf_s, b.link_mtbf_s) &&
         same(a.software_mtbf_s, b.software_mtbf_s) && same(a.replace_chips, b.replace_chips) &&
         same(a.file, b.file) && same(a.sources, b.sources);
}

}  // namespace titan::devices
