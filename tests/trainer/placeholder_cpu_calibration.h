// Test helper: a cpu-device calibration whose rates are placeholders, for tests that record for
// the cpu device only to read its memory walk (no rate enters the memory). Writes `path` and
// points TITAN_CPU_CALIBRATION at it.
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

namespace titan::testing {

inline void use_placeholder_cpu_calibration(const std::string& path) {
  std::ofstream(path) << "[cpu]\nsgemm_flops = 1e11\nmem_bytes_per_s = 1e10\nmpi_latency_s = 2e-6\n"
                         "mpi_bytes_per_s = 4e9\ncores = 2\nop_overhead_s = 7e-6\n";
  setenv("TITAN_CPU_CALIBRATION", path.c_str(), 1);
}

}  // namespace titan::testing
