// The cpu device: this host's measured calibration (bench/calibrate_cpu.cpp writes it) read
// from its file and turned into a ChipSpec. Split from chip_catalog.cpp, which holds the
// published chips.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "devices/chip_catalog.h"

namespace titan::devices {
ChipSpec cpu_chip(const CpuCalibration& cal) {
  TITAN_CONFIG_CHECK(cal.sgemm_flops > 0 && cal.mem_bytes_per_s > 0 && cal.mpi_bytes_per_s > 0,
                     "cpu calibration needs positive sgemm_flops, mem_bytes_per_s and "
                     "mpi_bytes_per_s (got ", cal.sgemm_flops, ", ", cal.mem_bytes_per_s, ", ",
                     cal.mpi_bytes_per_s, ")");
  ChipSpec c;
  c.name = "cpu";
  c.description = "this host's CPU (measured calibration)";
  c.family = TopologyFamily::kSwitchedDomain;
  c.peak_bf16_flops = cal.sgemm_flops;  // fp32 sgemm stands in for the bf16 peak (docs/mfu.md)
  c.hbm_bytes = cal.memory_bytes;
  c.hbm_bytes_per_s = cal.mem_bytes_per_s;
  c.fast_fabric = "shm";
  c.link_bytes_per_s = cal.mpi_bytes_per_s;  // measured, so efficiency 1
  c.links = 1;
  c.fast_domain_chips = std::max<int64_t>(cal.cores, 1);
  c.max_slice_chips = c.fast_domain_chips;
  c.hop_latency_s = cal.mpi_latency_s;
  c.scale_out_fabric = "tcp";
  c.scale_out_bytes_per_s = cal.mpi_bytes_per_s;
  c.scale_out_latency_s = cal.mpi_latency_s;
  c.link_efficiency = 1.0;
  c.scale_out_efficiency = 1.0;
  c.matmul_tile = 16;  // register-blocked sgemm micro-kernel edge
  // Output tiles are shared out over the intra-op threads of one rank.
  c.matmul_units = std::max<int64_t>(cal.threads > 0 ? cal.threads : cal.cores, 1);
  c.cpu_op_overhead_s = cal.op_overhead_s;
  c.cpu_view_overhead_s = cal.view_overhead_s > 0 ? cal.view_overhead_s : cal.op_overhead_s;
  c.fused_attention = false;  // libtorch CPU attention is the materialized math path
  c.cache_bytes = cal.cache_bytes;
  c.cache_bytes_per_s = cal.cache_bytes_per_s;
  c.serial_kernels = true;
  // rate(16) = rate * 16 / (16 + k0)  =>  k0 = 16 (rate / rate(16) - 1)
  if (cal.sgemm_k16_flops > 0)
    c.matmul_k_overhead = std::max(0.0, 16.0 * (cal.sgemm_flops / cal.sgemm_k16_flops - 1.0));
  return c;
}

CpuCalibration parse_cpu_calibration(const std::string& text, const std::string& origin) {
  CpuCalibration cal;
  bool have_sgemm = false, have_mem = false, have_lat = false, have_bw = false;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    line = strip_blanks_and_quotes(line);
    if (line.empty() || line[0] == '[') continue;  // blank or TOML section header
    size_t eq = line.find('=');
    TITAN_CONFIG_CHECK(eq != std::string::npos, origin, ":", lineno,
                       ": expected `key = value`, got '", line, "'");
    std::string key = strip_blanks_and_quotes(line.substr(0, eq));
    std::string val = strip_blanks_and_quotes(line.substr(eq + 1));
    double x = 0;
    try {
      size_t used = 0;
      x = std::stod(val, &used);
      TITAN_CONFIG_CHECK(used == val.size(), origin, ":", lineno, ": '", val,
                         "' is not a number");
    } catch (const std::logic_error&) {
      TITAN_CONFIG_FAIL(origin, ":", lineno, ": '", val, "' is not a number for key ", key);
    }
    if (key == "sgemm_flops") {
      cal.sgemm_flops = x;
      have_sgemm = true;
    } else if (key == "mem_bytes_per_s") {
      cal.mem_bytes_per_s = x;
      have_mem = true;
    } else if (key == "mpi_latency_s") {
      cal.mpi_latency_s = x;
      have_lat = true;
    } else if (key == "mpi_bytes_per_s") {
      cal.mpi_bytes_per_s = x;
      have_bw = true;
    } else if (key == "memory_bytes") {
      cal.memory_bytes = static_cast<int64_t>(x);
    } else if (key == "op_overhead_s") {
      cal.op_overhead_s = x;
    } else if (key == "view_overhead_s") {
      cal.view_overhead_s = x;
    } else if (key == "cache_bytes") {
      cal.cache_bytes = static_cast<int64_t>(x);
    } else if (key == "cache_bytes_per_s") {
      cal.cache_bytes_per_s = x;
    } else if (key == "sgemm_k16_flops") {
      cal.sgemm_k16_flops = x;
    } else if (key == "cores") {
      cal.cores = static_cast<int64_t>(x);
    } else if (key == "threads") {
      cal.threads = static_cast<int64_t>(x);
    } else {
      TITAN_CONFIG_FAIL(origin, ":", lineno, ": unknown cpu calibration key '", key,
                        "' (known: sgemm_flops mem_bytes_per_s mpi_latency_s mpi_bytes_per_s "
                        "memory_bytes op_overhead_s view_overhead_s cache_bytes cache_bytes_per_s "
                        "sgemm_k16_flops cores threads)");
    }
  }
  TITAN_CONFIG_CHECK(have_sgemm && have_mem && have_lat && have_bw, origin,
                     ": cpu calibration needs sgemm_flops, mem_bytes_per_s, mpi_latency_s and "
                     "mpi_bytes_per_s");
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

}  // namespace titan::devices
