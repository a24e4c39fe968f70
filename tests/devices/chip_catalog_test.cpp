// Tests for the chip catalog: every chip of docs/hardware.md is present with its figures, lookups
// fail clearly, and the cpu device comes from a calibration file.
#include "devices/chip_catalog.h"
#include "devices/compute_cost.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

TEST(ChipCatalog, HasEveryChipOfHardwareMd) {
  std::vector<std::string> want = {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7", "trn1",
                                   "trn2",   "trn3",    "a100",    "h100",    "h200",   "h100-96gb",
                                   "b200",   "cpu"};
  EXPECT_EQ(chip_names(), want);
}

TEST(ChipCatalog, FiguresMatchHardwareMd) {
  ChipSpec v7 = find_chip("tpu-v7");
  EXPECT_DOUBLE_EQ(v7.peak_bf16_flops, 2307e12);
  EXPECT_EQ(v7.hbm_bytes, int64_t{192} << 30);
  EXPECT_DOUBLE_EQ(v7.hbm_bytes_per_s, 7.37e12);
  EXPECT_DOUBLE_EQ(v7.link_bidi_per_chip(), 1.2e12);  // 1.2 TB/s bidi per chip
  EXPECT_EQ(v7.fast_domain_chips, 9216);
  EXPECT_EQ(v7.family, TopologyFamily::kTpuTorus3D);

  ChipSpec v5e = find_chip("TPU-V5E");  // case-insensitive
  EXPECT_DOUBLE_EQ(v5e.link_bidi_per_chip(), 360e9);  // 4 links x 45 GB/s x 2 directions
  EXPECT_DOUBLE_EQ(v5e.scale_out_bytes_per_s, 3.125e9);
  EXPECT_EQ(v5e.family, TopologyFamily::kTpuTorus2D);

  ChipSpec h100 = find_chip("h100");
  EXPECT_DOUBLE_EQ(h100.link_bytes_per_s * static_cast<double>(h100.links), 450e9);
  EXPECT_DOUBLE_EQ(h100.scale_out_bytes_per_s, 50e9);  // 400 Gb/s
  EXPECT_EQ(h100.fast_domain_chips, 8);

  ChipSpec trn2 = find_chip("trn2");
  EXPECT_NEAR(trn2.link_bidi_per_chip(), 1.28e12, 1e3);
  EXPECT_DOUBLE_EQ(trn2.scale_out_bytes_per_s, 25e9);  // 3.2 Tb/s per 16 chips
  EXPECT_EQ(find_chip("b200").max_slice_chips, 72);
}

TEST(ChipCatalog, UnknownDeviceListsValidNames) {
  try {
    find_chip("tpu-v9");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    std::string m = e.what();
    EXPECT_NE(m.find("unknown device 'tpu-v9'"), std::string::npos) << m;
    EXPECT_NE(m.find("tpu-v4 tpu-v5e tpu-v5p tpu-v6e tpu-v7 trn1 trn2 trn3 a100 h100 h200 h100-96gb b200 cpu"),
              std::string::npos)
        << m;
  }
}

TEST(ChipCatalog, CpuNeedsCalibration) {
  EXPECT_THROW(find_chip("cpu"), Error);
  CpuCalibration cal = parse_cpu_calibration(
      "# measured\n[cpu]\nsgemm_flops = 1.5e11\nmem_bytes_per_s = 1.2e10\n"
      "mpi_latency_s = 2e-6\nmpi_bytes_per_s = 4e9\ncores = 2\nop_overhead_s = 7e-6\n",
      "cal.toml");
  ChipSpec c = find_chip("cpu", &cal);
  EXPECT_DOUBLE_EQ(c.peak_bf16_flops, 1.5e11);
  EXPECT_DOUBLE_EQ(c.hbm_bytes_per_s, 1.2e10);
  EXPECT_DOUBLE_EQ(c.hop_latency_s, 2e-6);
  EXPECT_DOUBLE_EQ(c.link_bytes_per_s, 4e9);
  EXPECT_DOUBLE_EQ(c.link_efficiency, 1.0);  // measured, not datasheet
  EXPECT_EQ(c.fast_domain_chips, 2);
  EXPECT_DOUBLE_EQ(c.cpu_op_overhead_s, 7e-6);
  EXPECT_DOUBLE_EQ(c.cpu_view_overhead_s, 7e-6);  // not measured: as a kernel op
  EXPECT_FALSE(c.fused_attention);  // the CPU runs attention's math op by op
  EXPECT_TRUE(c.serial_kernels);
  EXPECT_EQ(c.cache_bytes, 0);
}

TEST(ChipCatalog, CpuCacheLevelViewOverheadAndThreads) {
  CpuCalibration cal = parse_cpu_calibration(
      "sgemm_flops = 1e11\nmem_bytes_per_s = 1e10\nmpi_latency_s = 1e-6\n"
      "mpi_bytes_per_s = 4e9\nop_overhead_s = 4e-6\nview_overhead_s = 1e-6\n"
      "cache_bytes = 16777216\ncache_bytes_per_s = 4e10\nsgemm_k16_flops = 5e10\n"
      "cores = 2\nthreads = 1\n",
      "cal.toml");
  ChipSpec c = find_chip("cpu", &cal);
  EXPECT_DOUBLE_EQ(c.cpu_view_overhead_s, 1e-6);
  EXPECT_EQ(c.cache_bytes, 16777216);
  EXPECT_DOUBLE_EQ(c.cache_bytes_per_s, 4e10);
  EXPECT_EQ(c.matmul_units, 1);  // output tiles go to the rank's threads, not the host's cores
  // Half the rate at K = 16: 16 / (16 + k0) = 1/2, so the per-tile cost is 16 K-steps.
  EXPECT_DOUBLE_EQ(c.matmul_k_overhead, 16.0);
  ComputeModel m(c, ExecutionMode::kEager);
  EXPECT_NEAR(m.matmul_efficiency({1, 1024, 1024, 48}), 48.0 / 64.0, 1e-12);
  // Accelerators keep the roofline's overlap and fused attention.
  ChipSpec h = find_chip("h100");
  EXPECT_TRUE(h.fused_attention);
  EXPECT_FALSE(h.serial_kernels);
  EXPECT_EQ(h.cache_bytes, 0);
  EXPECT_DOUBLE_EQ(h.matmul_k_overhead, 0.0);
}

TEST(ChipCatalog, CalibrationErrorsNameTheProblem) {
  try {
    parse_cpu_calibration("sgemm_flops = 1e11\nbogus = 3\n", "cal.toml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cal.toml:2: unknown cpu calibration key 'bogus'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_cpu_calibration("sgemm_flops = 1e11\n", "cal.toml"), Error);
  EXPECT_THROW(parse_cpu_calibration("sgemm_flops = fast\n", "cal.toml"), Error);
  EXPECT_THROW(load_cpu_calibration("/nonexistent/cal.toml"), Error);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
