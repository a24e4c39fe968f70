// The cpu device: its measured calibration file (TOML, written by launch/calibrate-cpu) and
// the ChipSpec built from it on top of devices/chips/cpu.toml.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

#include "common/error.h"
#include "devices/chip_catalog.h"
#include "devices/chip_file.h"
#include "devices/fused_ops.h"

namespace titan::devices {
namespace {

struct CalKey {
  const char* key;
  bool required;
  void (*set)(CpuCalibration&, double);
};

const CalKey kKeys[] = {
    {"sgemm_flops", true, [](CpuCalibration& c, double x) { c.sgemm_flops = x; }},
    {"mem_bytes_per_s", true, [](CpuCalibration& c, double x) { c.mem_bytes_per_s = x; }},
    {"mpi_latency_s", true, [](CpuCalibration& c, double x) { c.mpi_latency_s = x; }},
    {"mpi_bytes_per_s", true, [](CpuCalibration& c, double x) { c.mpi_bytes_per_s = x; }},
    {"memory_bytes", false,
     [](CpuCalibration& c, double x) { c.memory_bytes = static_cast<int64_t>(x); }},
    {"op_overhead_s", false, [](CpuCalibration& c, double x) { c.op_overhead_s = x; }},
    {"view_overhead_s", false, [](CpuCalibration& c, double x) { c.view_overhead_s = x; }},
    {"cache_bytes", false,
     [](CpuCalibration& c, double x) { c.cache_bytes = static_cast<int64_t>(x); }},
    {"cache_bytes_per_s", false, [](CpuCalibration& c, double x) { c.cache_bytes_per_s = x; }},
    {"sgemm_k16_flops", false, [](CpuCalibration& c, double x) { c.sgemm_k16_flops = x; }},
    {"cores", false, [](CpuCalibration& c, double x) { c.cores = static_cast<int64_t>(x); }},
    {"threads", false, [](CpuCalibration& c, double x) { c.threads = static_cast<int64_t>(x); }},
};

std::string known() {
  std::string s;
  for (const CalKey& k : kKeys) s += (s.empty() ? "" : " ") + std::string(k.key);
  return s;
}

}  // namespace

CpuCalibration parse_cpu_calibration(const std::string& text, const std::string& origin) {
  toml::table tbl;
  try {
    tbl = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    TITAN_CONFIG_FAIL(origin, ":", e.source().begin.line, ": ", e.description());
  }
  // The keys may sit at the top level or under a [cpu] table.
  const toml::table* keys = &tbl;
  if (const toml::table* cpu = tbl.get_as<toml::table>("cpu")) {
    TITAN_CONFIG_CHECK(tbl.size() == 1, origin, ": keys outside the [cpu] table");
    keys = cpu;
  }
  CpuCalibration cal;
  std::vector<bool> seen(std::size(kKeys), false);
  for (const auto& [k, node] : *keys) {
    const std::string key(k.str());
    const std::string where = origin + ":" + std::to_string(node.source().begin.line);
    if (key == "kernel_rates") {
      // [kernel_rates] "op name" = rate: the fused kernels calibrate_cpu timed (fused_ops.h).
      const toml::table* rates = node.as_table();
      TITAN_CONFIG_CHECK(rates != nullptr, where, ": 'kernel_rates' must be a table of op name = rate");
      for (const auto& [op, rate] : *rates) {
        const std::string name(op.str());
        const std::string at = origin + ":" + std::to_string(rate.source().begin.line);
        TITAN_CONFIG_CHECK(is_fused_kernel_op(name), at, ": unknown fused kernel '", name,
                           "' in kernel_rates (known: ", fused_kernel_op_names(), ")");
        auto x = rate.value<double>();
        TITAN_CONFIG_CHECK(x.has_value() && *x > 0, at, ": kernel_rates.'", name, "' must be a positive number");
        cal.kernel_rates[name] = *x;
      }
      continue;
    }
    size_t i = 0;
    while (i < std::size(kKeys) && key != kKeys[i].key) ++i;
    TITAN_CONFIG_CHECK(i < std::size(kKeys), where, ": unknown cpu calibration key '", key,
                       "' (known: ", known(), ")");
    auto x = node.value<double>();
    TITAN_CONFIG_CHECK(x.has_value(), where, ": '", key, "' must be a number");
    kKeys[i].set(cal, *x);
    seen[i] = true;
  }
  for (size_t i = 0; i < std::size(kKeys); ++i)
    TITAN_CONFIG_CHECK(seen[i] || !kKeys[i].required, origin,
                       ": cpu calibration needs sgemm_flops, mem_bytes_per_s, mpi_latency_s and "
                       "mpi_bytes_per_s (missing '", kKeys[i].key, "')");
  return cal;
}

CpuCalibration load_cpu_calibration(const std::string& path) {
  std::ifstream f(path);
  TITAN_CONFIG_CHECK(f.good(), "cannot read cpu calibration file '", path,
                     "' (run the calibration command first)");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_cpu_calibration(ss.str(), path);
}

ChipSpec cpu_chip(const CpuCalibration& cal) {
  TITAN_CONFIG_CHECK(cal.sgemm_flops > 0 && cal.mem_bytes_per_s > 0 && cal.mpi_bytes_per_s > 0,
                     "cpu calibration needs positive sgemm_flops, mem_bytes_per_s and "
                     "mpi_bytes_per_s (got ", cal.sgemm_flops, ", ", cal.mem_bytes_per_s, ", ",
                     cal.mpi_bytes_per_s, ")");
  // Fabric names, tile and kernel behaviour come from the data file; the rest is measured.
  ChipSpec c = catalog_chip("cpu");
  c.peak_bf16_flops = cal.sgemm_flops;  // fp32 sgemm stands in for the bf16 peak
  c.hbm_bytes = cal.memory_bytes;
  c.hbm_bytes_per_s = cal.mem_bytes_per_s;
  c.link_bytes_per_s = cal.mpi_bytes_per_s;  // measured, so efficiency 1
  c.fast_domain_chips = std::max<int64_t>(cal.cores, 1);
  c.max_slice_chips = c.fast_domain_chips;
  c.hop_latency_s = cal.mpi_latency_s;
  c.scale_out_bytes_per_s = cal.mpi_bytes_per_s;
  c.scale_out_latency_s = cal.mpi_latency_s;
  // Output tiles are shared out over the intra-op threads of one rank.
  c.matmul_units = std::max<int64_t>(cal.threads > 0 ? cal.threads : cal.cores, 1);
  c.cpu_op_overhead_s = cal.op_overhead_s;
  c.cpu_view_overhead_s = cal.view_overhead_s > 0 ? cal.view_overhead_s : cal.op_overhead_s;
  c.cache_bytes = cal.cache_bytes;
  c.matmul_rate_measured = true;  // sgemm_flops, the matmul peak here, is a measurement
  c.kernel_rates = cal.kernel_rates;
  c.cache_bytes_per_s = cal.cache_bytes_per_s;
  // rate(16) = rate * 16 / (16 + k0)  =>  k0 = 16 (rate / rate(16) - 1)
  if (cal.sgemm_k16_flops > 0)
    c.matmul_k_overhead = std::max(0.0, 16.0 * (cal.sgemm_flops / cal.sgemm_k16_flops - 1.0));
  return c;
}

}  // namespace titan::devices
