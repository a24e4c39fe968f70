// Kernel time by shape against each chip's matrix units: known shapes' matmul times, thin
// shapes on the memory roofline, sustained clocks of power-capped parts, and what a running
// collective takes from the kernels it overlaps.
#include <gtest/gtest.h>

#include <cmath>

#include "devices/compute_cost.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

TEST(KernelShape, KnownMatmulTimes) {
  // Each chip runs at its own sustained share (fitted, or borrowed from its vendor's chip).
  const double clock = find_chip("tpu-v5e").clock_ratio();
  // TPU v5e, 8192^3: 4 MXUs of 128x128 work on 64 x 64 full tiles: no shape loss.
  ComputeModel v5e(find_chip("tpu-v5e"), ExecutionMode::kCompiled);
  const OpDesc big = matmul_op("aten::mm", {1, 8192, 8192, 8192});
  EXPECT_NEAR(v5e.roofline_s(big), 2.0 * 8192 * 8192 * 8192 / (197e12 * clock), 1e-12);  // 6.78 ms
  // TPU v6e, 256x256 MXUs: a K of 128 (one head's dot product) fills half of each column.
  ComputeModel v6e(find_chip("tpu-v6e"), ExecutionMode::kCompiled);
  const double v6e_clock = find_chip("tpu-v6e").clock_ratio();
  EXPECT_NEAR(v6e.matmul_efficiency({64, 8192, 8192, 128}), v6e_clock * 0.5, 1e-12);
  EXPECT_NEAR(v6e.matmul_efficiency({64, 8192, 8192, 256}), v6e_clock, 1e-12);
  // trn2: 8 NeuronCores of 128x128; 4 output tiles split K two ways -> 8 of 8 engines busy.
  ComputeModel trn2(find_chip("trn2"), ExecutionMode::kCompiled);
  const double trn_clock = find_chip("trn2").clock_ratio();
  EXPECT_NEAR(trn2.matmul_efficiency({1, 256, 256, 4096}), trn_clock, 1e-12);
  EXPECT_NEAR(trn2.matmul_efficiency({1, 128, 128, 128}), trn_clock / 8, 1e-12);  // one engine
  // H100 4096 x 4096 x 4096: 1024 tiles on 132 SMs = 8 waves, the last 1024 - 7 x 132 = 100
  // full; at the 700 W sustained clock.
  ComputeModel h100(find_chip("h100"), ExecutionMode::kCompiled);
  const double e = 1507.0 / 1830.0 * 1024.0 / (8 * 132);
  EXPECT_NEAR(h100.roofline_s(matmul_op("aten::mm", {1, 4096, 4096, 4096})),
              2.0 * 4096 * 4096 * 4096 / (989e12 * e), 1e-12);  // 0.175 ms
}

TEST(KernelShape, ThinShapesFollowTheMemoryRoofline) {
  // 128 tokens through an 8192 x 8192 weight on v5e: 2 x 128 x 8192^2 FLOPs take 87 us, but
  // the 134 MB weight takes 195 us to stream at 85% of 0.81 TB/s.
  ComputeModel v5e(find_chip("tpu-v5e"), ExecutionMode::kCompiled);
  const OpDesc thin = matmul_op("aten::mm", {1, 128, 8192, 8192});
  const double bytes = (128.0 * 8192 * 2 + 8192.0 * 8192) * 2;
  EXPECT_NEAR(v5e.roofline_s(thin), bytes / (0.81e12 * 0.85), 1e-12);
  EXPECT_GT(v5e.roofline_s(thin), 2.0 * 128 * 8192 * 8192 / 197e12 * 2);
}

TEST(KernelShape, PowerCappedPartRunsAtItsSustainedClock) {
  const ChipSpec capped = find_chip("h100-96gb"), full = find_chip("h100");
  EXPECT_DOUBLE_EQ(capped.peak_bf16_flops, full.peak_bf16_flops);  // same nominal peak
  EXPECT_NEAR(capped.clock_ratio(), 1218.0 / 1830.0, 1e-12);
  // Board power per SM ~ f^1.58 across GH100 parts (SXM5 700 W / 132 SMs at 1590 MHz, PCIe
  // 350 W / 114 SMs at 1125 MHz), applied to a 500 W cap.
  const double exponent = std::log((350.0 / 114) / (700.0 / 132)) / std::log(1125.0 / 1590.0);
  EXPECT_NEAR(capped.clock_ratio() / full.clock_ratio(), std::pow(500.0 / 700.0, 1 / exponent), 1e-3);
  ComputeModel a(capped, ExecutionMode::kCompiled), b(full, ExecutionMode::kCompiled);
  const OpDesc mm = matmul_op("aten::mm", {1, 8192, 8192, 8192});
  EXPECT_NEAR(a.roofline_s(mm) / b.roofline_s(mm), 1507.0 / 1218.0, 1e-12);
  // Memory-bound work does not slow with the clock.
  const OpDesc add = pointwise_op("aten::add", OpKind::kElementwise, 2 << 20, 1 << 20);
  EXPECT_NEAR(a.roofline_s(add), (3 << 20) / (2.4e12 * 0.85), 1e-15);
  // No chip borrows another vendor's share: chips with published runs carry their own fitted
  // share, the others borrow from a chip of their own vendor.
  for (const char* name : {"tpu-v4", "tpu-v5p", "tpu-v6e", "tpu-v7", "trn1", "a100"}) {
    EXPECT_GT(find_chip(name).fitted_clock_share, 0) << name;
    EXPECT_DOUBLE_EQ(find_chip(name).clock_ratio(), find_chip(name).fitted_clock_share) << name;
  }
  const std::pair<const char*, const char*> borrowers[] = {
      {"tpu-v5e", "tpu-v5p"}, {"trn2", "trn1"}, {"trn3", "trn1"}, {"b200", "h100"}};
  for (const auto& [name, donor] : borrowers) {
    EXPECT_EQ(find_chip(name).sustained_clock_from, donor) << name;
    EXPECT_DOUBLE_EQ(find_chip(name).clock_ratio(), find_chip(donor).clock_ratio()) << name;
  }
}

TEST(KernelShape, CommunicationTakesSmsOnGpusAndHbmEverywhere) {
  ComputeModel h100(find_chip("h100"), ExecutionMode::kCompiled);
  // A compute-bound GEMM loses the 16 SMs NCCL's channels occupy.
  auto kernels = h100.lower({matmul_op("aten::mm", {1, 8192, 8192, 8192})});
  ASSERT_EQ(kernels.size(), 1u);
  const Kernel& k = kernels[0];
  const double slowed = k.launch_s + k.compute_s / (1 - 16.0 / 132);
  EXPECT_NEAR(h100.rate_under_comm(k), (k.launch_s + k.exec_s) / slowed, 1e-12);
  // A memory-bound kernel loses the HBM bandwidth the collective's bytes use: NVLink 2 x 450
  // GB/s at 80% against 3.35 TB/s at 85%.
  auto add = h100.lower({pointwise_op("aten::add", OpKind::kElementwise, 200 << 20, 100 << 20)});
  const double share = 2 * 450e9 * 0.8 / (3.35e12 * 0.85);
  EXPECT_NEAR(h100.rate_under_comm(add[0]),
              (add[0].launch_s + add[0].exec_s) / (add[0].launch_s + add[0].memory_s / (1 - share)),
              1e-12);
  // TPU collectives run on DMA engines: a compute-bound matmul keeps its speed.
  ComputeModel v7(find_chip("tpu-v7"), ExecutionMode::kCompiled);
  auto mm7 = v7.lower({matmul_op("aten::mm", {1, 8192, 8192, 8192})});
  EXPECT_DOUBLE_EQ(v7.rate_under_comm(mm7[0]), 1.0);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
