// Chip data files (see chip_file.h): the table of keys a file may set, their physical
// dimension and units, and the rules that every number carries its source.
#include "devices/chip_file.h"

#include <cmath>
#include <filesystem>
#include <toml++/toml.h>
#include <variant>

#include "common/error.h"

namespace titan::devices {
namespace {

enum class Dim { kCount, kFraction, kFlops, kBytes, kBytesPerS, kSeconds, kHertz, kWatts };

struct Unit {
  const char* name;
  Dim dim;
  double factor;
};

// Units a figure may be written in (`{ value = 400, unit = "Gb/s" }`); without a unit the
// value is in the base unit of its dimension (bytes, bytes/s, FLOP/s, s, Hz, W).
constexpr Unit kUnits[] = {
    {"B", Dim::kBytes, 1},          {"GB", Dim::kBytes, 1e9},
    {"TB", Dim::kBytes, 1e12},      {"MiB", Dim::kBytes, 1048576.0},
    {"GiB", Dim::kBytes, kGiB},     {"TiB", Dim::kBytes, 1024.0 * kGiB},
    {"B/s", Dim::kBytesPerS, 1},    {"GB/s", Dim::kBytesPerS, 1e9},
    {"TB/s", Dim::kBytesPerS, 1e12}, {"GiB/s", Dim::kBytesPerS, kGiB},
    {"TiB/s", Dim::kBytesPerS, 1024.0 * kGiB}, {"Gb/s", Dim::kBytesPerS, 1e9 / 8},
    {"Tb/s", Dim::kBytesPerS, 1e12 / 8}, {"FLOP/s", Dim::kFlops, 1},
    {"TFLOP/s", Dim::kFlops, 1e12}, {"s", Dim::kSeconds, 1},
    {"ms", Dim::kSeconds, 1e-3},    {"us", Dim::kSeconds, 1e-6},
    {"ns", Dim::kSeconds, 1e-9},    {"MHz", Dim::kHertz, 1e6},
    {"min", Dim::kSeconds, 60},     {"h", Dim::kSeconds, 3600},
    {"W", Dim::kWatts, 1},          {"kW", Dim::kWatts, 1e3},
    {"GHz", Dim::kHertz, 1e9},
};

using Member = std::variant<double ChipSpec::*, int64_t ChipSpec::*, bool ChipSpec::*,
                            std::string ChipSpec::*>;

struct Field {
  const char* section;  // "" for top-level keys
  const char* key;
  Dim dim;              // numbers only
  Member member;
};

// Every key a chip file may set. Numbers need a source; strings and booleans do not.
const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      {"", "name", Dim::kCount, &ChipSpec::name},
      {"", "description", Dim::kCount, &ChipSpec::description},
      {"compute", "peak_bf16_flops", Dim::kFlops, &ChipSpec::peak_bf16_flops},
      {"compute", "peak_clock", Dim::kHertz, &ChipSpec::peak_clock_hz},
      {"compute", "sustained_clock", Dim::kHertz, &ChipSpec::sustained_clock_hz},
      {"compute", "sustained_clock_from", Dim::kCount, &ChipSpec::sustained_clock_from},
      {"compute", "fitted_clock_share", Dim::kFraction, &ChipSpec::fitted_clock_share},
      {"memory", "hbm_bytes", Dim::kBytes, &ChipSpec::hbm_bytes},
      {"memory", "hbm_bytes_per_s", Dim::kBytesPerS, &ChipSpec::hbm_bytes_per_s},
      {"memory", "efficiency", Dim::kFraction, &ChipSpec::hbm_efficiency},
      {"host", "link_bytes_per_s", Dim::kBytesPerS, &ChipSpec::host_link_bytes_per_s},
      {"fabric", "name", Dim::kCount, &ChipSpec::fast_fabric},
      {"fabric", "link_bytes_per_s", Dim::kBytesPerS, &ChipSpec::link_bytes_per_s},
      {"fabric", "links", Dim::kCount, &ChipSpec::links},
      {"fabric", "fast_domain_chips", Dim::kCount, &ChipSpec::fast_domain_chips},
      {"fabric", "max_slice_chips", Dim::kCount, &ChipSpec::max_slice_chips},
      {"fabric", "hop_latency_s", Dim::kSeconds, &ChipSpec::hop_latency_s},
      {"fabric", "torus_dims", Dim::kCount, &ChipSpec::torus_dims},
      {"fabric", "wraparound", Dim::kCount, &ChipSpec::wraparound},
      {"fabric", "wrap_edge", Dim::kCount, &ChipSpec::wrap_edge},
      {"fabric", "efficiency", Dim::kFraction, &ChipSpec::link_efficiency},
      {"scale_out", "name", Dim::kCount, &ChipSpec::scale_out_fabric},
      {"scale_out", "bytes_per_s", Dim::kBytesPerS, &ChipSpec::scale_out_bytes_per_s},
      {"scale_out", "latency_s", Dim::kSeconds, &ChipSpec::scale_out_latency_s},
      {"scale_out", "efficiency", Dim::kFraction, &ChipSpec::scale_out_efficiency},
      {"matmul", "tile", Dim::kCount, &ChipSpec::matmul_tile},
      {"matmul", "tile_k", Dim::kCount, &ChipSpec::matmul_tile_k},
      {"matmul", "units", Dim::kCount, &ChipSpec::matmul_units},
      {"matmul", "measured_rate", Dim::kCount, &ChipSpec::matmul_rate_measured},
      {"kernels", "attention_peak_fraction", Dim::kFraction, &ChipSpec::attention_peak_fraction},
      {"kernels", "vector_peak_fraction", Dim::kFraction, &ChipSpec::vector_peak_fraction},
      {"kernels", "fused_attention", Dim::kCount, &ChipSpec::fused_attention},
      {"kernels", "serial_kernels", Dim::kCount, &ChipSpec::serial_kernels},
      {"kernels", "host_fused_kernels", Dim::kCount, &ChipSpec::host_fused_kernels},
      {"kernels", "comm_units", Dim::kCount, &ChipSpec::comm_units},
      {"kernels", "comm_memory_traffic", Dim::kFraction, &ChipSpec::comm_memory_traffic},
      {"dispatch", "eager_host_per_op", Dim::kSeconds, &ChipSpec::eager_host_per_op_s},
      {"dispatch", "eager_launch", Dim::kSeconds, &ChipSpec::eager_launch_s},
      {"dispatch", "defer_host_per_op", Dim::kSeconds, &ChipSpec::defer_host_per_op_s},
      {"dispatch", "defer_launch", Dim::kSeconds, &ChipSpec::defer_launch_s},
      {"dispatch", "compiled_host_per_op", Dim::kSeconds, &ChipSpec::compiled_host_per_op_s},
      {"dispatch", "compiled_launch", Dim::kSeconds, &ChipSpec::compiled_launch_s},
      {"dispatch", "separate_collective_launch", Dim::kSeconds,
       &ChipSpec::separate_collective_launch_s},
      {"dispatch", "compiled_fuses_matmul_epilogue", Dim::kCount, &ChipSpec::compiled_fuses_matmul_epilogue},
      {"dispatch", "compiled_covers_step", Dim::kCount, &ChipSpec::compiled_covers_step},
      {"power", "tdp", Dim::kWatts, &ChipSpec::tdp_w},
      {"power", "idle", Dim::kWatts, &ChipSpec::idle_w},
      {"power", "host_per_chip", Dim::kWatts, &ChipSpec::host_w_per_chip},
      {"power", "network_per_chip", Dim::kWatts, &ChipSpec::network_w_per_chip},
      {"reliability", "chip_mtbf", Dim::kSeconds, &ChipSpec::chip_mtbf_s},
      {"reliability", "host_mtbf", Dim::kSeconds, &ChipSpec::host_mtbf_s},
      {"reliability", "link_mtbf", Dim::kSeconds, &ChipSpec::link_mtbf_s},
      {"reliability", "software_mtbf", Dim::kSeconds, &ChipSpec::software_mtbf_s},
      {"reliability", "replace_chips", Dim::kCount, &ChipSpec::replace_chips},
  };
  return f;
}

struct Family {
  const char* name;
  TopologyFamily value;
};
constexpr Family kFamilies[] = {{"tpu-torus-2d", TopologyFamily::kTpuTorus2D},
                                {"tpu-torus-3d", TopologyFamily::kTpuTorus3D},
                                {"trainium-torus", TopologyFamily::kTrainiumTorus},
                                {"switched", TopologyFamily::kSwitchedDomain}};

std::string at(const std::string& path, const toml::node& n) {
  return path + ":" + std::to_string(n.source().begin.line);
}

constexpr const char* kTables =
    "top level: name description base family; tables: compute memory fabric scale_out matmul kernels dispatch "
    "power reliability";

std::string known_keys(const std::string& section) {
  std::string s;
  for (const Field& f : fields())
    if (section == f.section) s += (s.empty() ? "" : " ") + std::string(f.key);
  return s;
}

// A number: `x = 1.5`, or `x = { value = 1.5, unit = "GB/s", per = 12, source = "..." }`
// (`per`: the source's figure covers that many links / chips; the value is divided by it).
double read_number(const std::string& path, const std::string& full, const toml::node& n,
                   Dim dim, const std::string& table_source, std::string* source) {
  const toml::node* v = &n;
  double per = 1;
  std::string unit;
  *source = table_source;
  if (const toml::table* t = n.as_table()) {
    for (const auto& [k, x] : *t) {
      const std::string key(k.str());
      TITAN_CONFIG_CHECK(key == "value" || key == "unit" || key == "per" || key == "source",
                         at(path, x), ": unknown key '", key, "' in figure '", full,
                         "' (known: value unit per source)");
    }
    v = t->get("value");
    TITAN_CONFIG_CHECK(v != nullptr, at(path, n), ": figure '", full, "' has no value");
    if (auto s = t->get_as<std::string>("source")) *source = s->get();
    if (auto u = t->get_as<std::string>("unit")) unit = u->get();
    if (const toml::node* p = t->get("per")) {
      auto pv = p->value<double>();
      TITAN_CONFIG_CHECK(pv && *pv > 0, at(path, *p), ": '", full, ".per' must be a positive number");
      per = *pv;
    }
  }
  auto x = v->value<double>();
  TITAN_CONFIG_CHECK(x.has_value(), at(path, *v), ": '", full, "' must be a number, got ", v->type());
  TITAN_CONFIG_CHECK(!source->empty(), at(path, n), ": figure '", full,
                     "' has no source (write { value = ..., source = \"...\" } or give its table "
                     "a `source`)");
  double factor = 1;
  if (!unit.empty()) {
    bool found = false;
    for (const Unit& u : kUnits)
      if (unit == u.name && u.dim == dim) {
        factor = u.factor;
        found = true;
      }
    TITAN_CONFIG_CHECK(found, at(path, n), ": unit '", unit, "' does not fit figure '", full, "'");
  }
  return *x * factor / per;
}

void apply(const std::string& path, const Field& f, const toml::node& n,
           const std::string& table_source, ChipSpec& spec) {
  const std::string full = f.section[0] ? std::string(f.section) + "." + f.key : f.key;
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(spec.*member)>;
        if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool>) {
          auto v = n.value<T>();
          TITAN_CONFIG_CHECK(v.has_value(), at(path, n), ": '", full, "' must be a ",
                             std::is_same_v<T, bool> ? "boolean" : "string");
          spec.*member = *v;
        } else {
          std::string source;
          const double x = read_number(path, full, n, f.dim, table_source, &source);
          TITAN_CONFIG_CHECK(x >= 0, at(path, n), ": '", full, "' must not be negative");
          spec.*member = static_cast<T>(std::is_same_v<T, int64_t> ? std::llround(x) : x);
          spec.sources[full] = source;
        }
      },
      f.member);
}

toml::table parse(const std::string& path) {
  TITAN_CONFIG_CHECK(std::filesystem::is_regular_file(path), "cannot read chip file '", path, "'");
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    TITAN_CONFIG_FAIL(path, ":", e.source().begin.line, ": ", e.description());
  }
}

ChipSpec read(const std::string& path, const std::string& dir, int depth) {
  TITAN_CONFIG_CHECK(depth < 8, path, ": `base` chain too deep (a cycle?)");
  const toml::table tbl = parse(path);
  ChipSpec spec;
  if (auto base = tbl.get_as<std::string>("base")) {
    spec = read(dir + "/" + base->get() + ".toml", dir, depth + 1);
    spec.name.clear();  // a derived chip names itself
  }
  spec.file = path;
  for (const auto& [k, node] : tbl) {
    const std::string key(k.str());
    if (key == "base") continue;
    if (key == "family") {
      auto v = node.value<std::string>();
      bool found = false;
      for (const Family& fam : kFamilies)
        if (v && *v == fam.name) {
          spec.family = fam.value;
          found = true;
        }
      TITAN_CONFIG_CHECK(found, at(path, node),
                         ": 'family' must be one of tpu-torus-2d tpu-torus-3d trainium-torus switched");
      continue;
    }
    if (const toml::table* section = node.as_table()) {
      // A table no field lives in (a typo, or [chip] around the top-level keys): name the
      // tables there are, not an empty key list.
      TITAN_CONFIG_CHECK(!known_keys(key).empty(), at(path, node), ": unknown table [", key, "] (", kTables, ")");
      std::string table_source;
      if (auto s = section->get_as<std::string>("source")) table_source = s->get();
      for (const auto& [sk, sn] : *section) {
        const std::string skey(sk.str());
        if (skey == "source") continue;
        const Field* f = nullptr;
        for (const Field& c : fields())
          if (key == c.section && skey == c.key) f = &c;
        TITAN_CONFIG_CHECK(f != nullptr, at(path, sn), ": unknown key '", key, ".", skey,
                           "' (known in [", key, "]: ", known_keys(key), ")");
        apply(path, *f, sn, table_source, spec);
      }
      continue;
    }
    const Field* f = nullptr;
    for (const Field& c : fields())
      if (c.section[0] == '\0' && key == c.key) f = &c;
    TITAN_CONFIG_CHECK(f != nullptr, at(path, node), ": unknown key '", key, "' (", kTables, ")");
    apply(path, *f, node, "", spec);
  }
  return spec;
}

}  // namespace

ChipSpec read_chip_file(const std::string& path, const std::string& dir) {
  ChipSpec spec = read(path, dir, 0);
  TITAN_CONFIG_CHECK(!spec.name.empty(), path, ": missing key 'name'");
  if (spec.sustained_clock_hz <= 0 && spec.fitted_clock_share <= 0 && !spec.sustained_clock_from.empty()) {
    // The donor is read without this step, so it must carry its own measured or fitted share.
    const ChipSpec donor = read(dir + "/" + spec.sustained_clock_from + ".toml", dir, 0);
    TITAN_CONFIG_CHECK((donor.sustained_clock_hz > 0 && donor.peak_clock_hz > 0) || donor.fitted_clock_share > 0, path,
                       ": compute.sustained_clock_from = '", spec.sustained_clock_from,
                       "' names a chip without its own compute.sustained_clock and peak_clock or compute.fitted_clock_share");
    spec.borrowed_clock_ratio = donor.clock_ratio();
  }
  return spec;
}

void check_chip(const ChipSpec& c) {
  if (c.name.empty() || c.name[0] == '_' || c.name == "cpu") return;
  auto need = [&](bool ok, const char* key) {
    TITAN_CONFIG_CHECK(ok, c.file, ": chip '", c.name, "' needs a positive '", key, "'");
  };
  need(c.peak_bf16_flops > 0, "compute.peak_bf16_flops");
  need(c.hbm_bytes > 0, "memory.hbm_bytes");
  need(c.hbm_bytes_per_s > 0, "memory.hbm_bytes_per_s");
  need(c.link_bytes_per_s > 0, "fabric.link_bytes_per_s");
  need(c.links > 0, "fabric.links");
  need(c.fast_domain_chips > 0, "fabric.fast_domain_chips");
  need(c.max_slice_chips > 0, "fabric.max_slice_chips");
  need(c.link_efficiency > 0, "fabric.efficiency");
  need(c.scale_out_bytes_per_s > 0, "scale_out.bytes_per_s");
  need(c.scale_out_efficiency > 0, "scale_out.efficiency");
  need(c.matmul_tile > 0, "matmul.tile");
  need(c.matmul_units > 0, "matmul.units");
  need(c.hbm_efficiency > 0, "memory.efficiency");
  need(c.vector_peak_fraction > 0, "kernels.vector_peak_fraction");
  if (c.family == TopologyFamily::kSwitchedDomain) return;
  need(c.torus_dims > 0, "fabric.torus_dims");
  const bool known = c.wraparound == "axis-multiple" || c.wraparound == "whole-slice" ||
                     c.wraparound == "full-edge" || c.wraparound == "none";
  TITAN_CONFIG_CHECK(known, c.file, ": chip '", c.name, "': 'fabric.wraparound' must be one of axis-multiple "
                     "whole-slice full-edge none, got '", c.wraparound, "'");
  if (c.wraparound != "none") need(c.wrap_edge > 0, "fabric.wrap_edge");
}

}  // namespace titan::devices
