// Tests for the roofline compute model: shape-dependent matmul efficiency, flash attention,
// elementwise fusion per execution mode, dispatch overheads.
#include "devices/compute_cost.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

TEST(ComputeCost, LargeGemmNearEightyPercent) {
  ComputeModel h200(find_chip("h200"), ExecutionMode::kCompiled);
  // 8192^3 with 128x128 tiles: 4096 tiles over 132 SMs = 32 waves, the last 4/132 full; the
  // 700 W part sustains 1507 of the 1830 MHz its peak is quoted at.
  double e = h200.matmul_efficiency({1, 8192, 8192, 8192});
  EXPECT_NEAR(e, 1507.0 / 1830.0 * 4096.0 / (32 * 132), 1e-12);
  EXPECT_NEAR(e * 989, 790, 1.0);  // TFLOP/s: the measurement the sustained clock comes from
  OpDesc mm = matmul_op("aten::mm", {1, 8192, 8192, 8192});
  EXPECT_DOUBLE_EQ(mm.flops, 2.0 * 8192.0 * 8192.0 * 8192.0);
  EXPECT_NEAR(h200.roofline_s(mm), mm.flops / (989e12 * e), 1e-12);
}

TEST(ComputeCost, SkinnyMatmulIsMemoryBound) {
  ComputeModel h100(find_chip("h100"), ExecutionMode::kCompiled);
  MatmulShape s{1, 16, 4096, 4096};
  double e = h100.matmul_efficiency(s);
  // m = 16 fills 1/8 of a 128 tile; 32 tiles split K 4 ways -> 128 of 132 SMs busy.
  EXPECT_NEAR(e, 1507.0 / 1830.0 * 0.125 * 128.0 / 132.0, 1e-12);
  OpDesc op = matmul_op("aten::mm", s);
  double bytes = (16.0 * 4096 + 4096.0 * 4096 + 16.0 * 4096) * 2;
  EXPECT_NEAR(h100.roofline_s(op), bytes / (3.35e12 * 0.85), 1e-12);  // 11.9 us from HBM
  // Tile padding: a 4097-wide GEMM pays for 33 tiles of 128 (v5e: 4 MXUs, whole waves), at
  // the sustained clock share v5e borrows from v5p's fit (same TensorCore generation).
  ComputeModel v5e(find_chip("tpu-v5e"), ExecutionMode::kCompiled);
  const double clock = find_chip("tpu-v5p").fitted_clock_share;
  ASSERT_GT(clock, 0);
  EXPECT_NEAR(v5e.matmul_efficiency({1, 8192, 4097, 8192}), clock * 4097.0 / (33 * 128), 1e-12);
  EXPECT_NEAR(v5e.matmul_efficiency({1, 8192, 4096, 8192}), clock, 1e-12);
}

TEST(ComputeCost, FlashAttentionSkipsCausalBlocksAndNeverWritesScores) {
  ComputeModel v7(find_chip("tpu-v7"), ExecutionMode::kCompiled);
  AttentionShape a{1, 32, 8, 8192, 8192, 128, true, false};
  OpDesc fwd = attention_op(a);
  double full = 4.0 * 32 * 8192.0 * 8192.0 * 128;
  EXPECT_DOUBLE_EQ(fwd.flops, full);  // recorded FLOPs: the MFU convention, not halved
  // 256-wide tiles: 32 blocks per side, 32*33/2 of 32^2 computed.
  EXPECT_NEAR(v7.attention_flops(a), full * 33.0 / 64.0, 1.0);
  int64_t q = 32LL * 8192 * 128, kv = 8LL * 8192 * 128;
  EXPECT_EQ(fwd.bytes_read, (q + 2 * kv) * 2);
  EXPECT_EQ(fwd.bytes_written, q * 2 + 32LL * 8192 * 4);
  // Efficiency: head_dim 128 fills half of a 256-deep MXU in both GEMMs; x 0.9 for softmax;
  // at v7's own sustained clock share.
  const double clock = find_chip("tpu-v7").clock_ratio();
  double eff = clock * 0.5 * 0.9;
  EXPECT_NEAR(v7.roofline_s(fwd), v7.attention_flops(a) / (2307e12 * eff), 1e-12);
  AttentionShape b = a;
  b.backward = true;
  OpDesc bwd = attention_op(b);
  EXPECT_DOUBLE_EQ(bwd.flops, 2.5 * full);
  EXPECT_NEAR(v7.roofline_s(bwd), 2.5 * v7.attention_flops(a) / (2307e12 * clock * 0.5 * 0.75),
              1e-12);
}

TEST(ComputeCost, Fa2CapsAttentionOnHopper) {
  ComputeModel h100(find_chip("h100"), ExecutionMode::kEager);
  AttentionShape a{2, 32, 8, 8192, 8192, 128, true, false};
  // The GEMM model would give 0.82 x 0.9 = 0.74 of peak; PyTorch's FA2 reaches ~0.35: 0.425
  // of the 700 W part's sustained clock.
  const double cap = 0.425 * 1507.0 / 1830.0;
  EXPECT_NEAR(cap, 0.35, 0.001);
  EXPECT_NEAR(h100.roofline_s(attention_op(a)), h100.attention_flops(a) / (989e12 * cap), 1e-12);
  a.backward = true;
  EXPECT_NEAR(h100.roofline_s(attention_op(a)),
              h100.attention_flops(a) / (989e12 * cap * 0.75 / 0.9), 1e-12);
}

std::vector<OpDesc> unary_chain(int n, int64_t bytes) {
  std::vector<OpDesc> ops;
  for (int i = 0; i < n; ++i) ops.push_back(pointwise_op("aten::mul", OpKind::kElementwise, bytes, bytes));
  return ops;
}

TEST(ComputeCost, EagerWritesEveryResultFusionDoesNot) {
  const int64_t mb100 = 100 * 1000 * 1000;
  ComputeModel eager(find_chip("tpu-v7"), ExecutionMode::kEager);
  ComputeModel fused(find_chip("tpu-v7"), ExecutionMode::kDeferAndFuse);
  auto ops = unary_chain(3, mb100);
  ops.insert(ops.begin() + 1, pointwise_op("aten::view", OpKind::kView, 0, 0));
  auto ke = eager.lower(ops);
  auto kf = fused.lower(ops);
  ASSERT_EQ(ke.size(), 4u);
  ASSERT_EQ(kf.size(), 1u);
  EXPECT_EQ(kf[0].ops, 4);
  double hbm = 7.37e12 * 0.85;
  EXPECT_NEAR(ke[0].exec_s, 2.0 * mb100 / hbm, 1e-12);
  EXPECT_EQ(ke[1].exec_s, 0.0);  // the view moves nothing
  EXPECT_EQ(ke[1].launch_s, 0.0);
  EXPECT_NEAR(kf[0].exec_s, 2.0 * mb100 / hbm, 1e-12);  // read once, write once
  EXPECT_EQ(kf[0].bytes, 2 * mb100);
  // Overheads: eager pays host dispatch for all 4 ops and a launch for 3 kernels.
  double host_e = 0, launch_e = 0;
  for (const Kernel& k : ke) {
    host_e += k.host_s;
    launch_e += k.launch_s;
  }
  EXPECT_NEAR(host_e, 4 * 15e-6, 1e-15);
  EXPECT_NEAR(launch_e, 3 * 5e-6, 1e-15);
  EXPECT_NEAR(kf[0].host_s, 4 * 2e-6, 1e-15);
  EXPECT_NEAR(kf[0].launch_s, 1e-6, 1e-15);
}

TEST(ComputeCost, CompiledFoldsEpilogueIntoMatmulWhereTheCompilerDoes) {
  std::vector<OpDesc> ops = {matmul_op("aten::mm", {1, 4096, 4096, 4096})};
  const int64_t out = 4096LL * 4096 * 2;
  ops.push_back(pointwise_op("aten::silu", OpKind::kElementwise, out, out));
  // XLA (TPU): the silu is the matmul's epilogue.
  auto k = ComputeModel(find_chip("tpu-v7"), ExecutionMode::kCompiled).lower(ops);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[1].launch_s, 0.0);
  EXPECT_EQ(k[1].bytes, out);  // only the write: the read came from the accumulators
  EXPECT_EQ(k[0].host_s, 0.0);
  // torch.compile (GPU): cuBLAS takes no epilogue; the silu reads the product from HBM and
  // launches its own kernel.
  const ChipSpec& h100 = find_chip("h100");
  EXPECT_FALSE(h100.compiled_fuses_matmul_epilogue);
  k = ComputeModel(h100, ExecutionMode::kCompiled).lower(ops);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[1].launch_s, h100.compiled_launch_s);
  EXPECT_EQ(k[1].bytes, 2 * out);
}

TEST(ComputeCost, TorchCompilePerBlockLeavesTheRestOfTheStepEager) {
  // Three pointwise ops in a block, then three outside (an optimizer's update).
  const int64_t mb = 1 << 20;
  std::vector<OpDesc> ops;
  for (int i = 0; i < 6; ++i) {
    ops.push_back(pointwise_op("aten::mul", OpKind::kElementwise, 2 * mb, mb));
    ops.back().outside_blocks = i >= 3;
  }
  // torch.compile per block (GPU): the block's chain is one kernel; the ops after it run one by
  // one at eager's host and launch costs, each reading and writing HBM.
  const ChipSpec& h100 = find_chip("h100");
  EXPECT_FALSE(h100.compiled_covers_step);
  auto k = ComputeModel(h100, ExecutionMode::kCompiled).lower(ops);
  ASSERT_EQ(k.size(), 4u);
  EXPECT_EQ(k[0].ops, 3);
  EXPECT_EQ(k[0].launch_s, h100.compiled_launch_s);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(k[i].ops, 1);
    EXPECT_EQ(k[i].bytes, 3 * mb);
    EXPECT_EQ(k[i].host_s, h100.eager_host_per_op_s);
    EXPECT_EQ(k[i].launch_s, h100.eager_launch_s);
  }
  // Eager and defer_and_fuse treat both halves alike: 6 kernels, and one chain of 6.
  EXPECT_EQ(ComputeModel(h100, ExecutionMode::kEager).lower(ops).size(), 6u);
  EXPECT_EQ(ComputeModel(h100, ExecutionMode::kDeferAndFuse).lower(ops).size(), 1u);
  // XLA (TPU) compiles the whole step: one chain of 6.
  const ChipSpec& v7 = find_chip("tpu-v7");
  EXPECT_TRUE(v7.compiled_covers_step);
  k = ComputeModel(v7, ExecutionMode::kCompiled).lower(ops);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].ops, 6);
}

TEST(ComputeCost, CpuAddsMathAndMemoryAndStreamsSmallOpsFromCache) {
  CpuCalibration cal;
  cal.sgemm_flops = 1e11;
  cal.mem_bytes_per_s = 1e10;
  cal.mpi_bytes_per_s = 4e9;
  cal.op_overhead_s = 4e-6;
  cal.view_overhead_s = 1e-6;
  cal.cache_bytes = 16 << 20;
  cal.cache_bytes_per_s = 4e10;
  cal.threads = 1;
  ComputeModel cpu(cpu_chip(cal), ExecutionMode::kEager);
  // [1024 x 128] x [128 x 384]: measured sgemm rate (efficiency 1, 16-wide tiles fit) plus
  // the operands and result (2.2 MB, in cache) at the cache bandwidth: the times add.
  OpDesc mm = matmul_op("aten::mm", {1, 1024, 384, 128}, 4);
  const double bytes = (1024.0 * 128 + 128.0 * 384 + 1024.0 * 384) * 4;
  EXPECT_NEAR(cpu.roofline_s(mm), mm.flops / 1e11 + bytes / 4e10, 1e-12);
  // An elementwise op over 64 MB of operands misses the cache: DRAM bandwidth.
  OpDesc big = pointwise_op("aten::add", OpKind::kElementwise, 48 << 20, 16 << 20, 4 << 20);
  EXPECT_NEAR(cpu.roofline_s(big), (4 << 20) / (1e11 / 16) + (64 << 20) / 1e10, 1e-12);
  // Eager host cost: a kernel op pays op_overhead_s, a view view_overhead_s.
  OpDesc view = pointwise_op("aten::view", OpKind::kView, 0, 0);
  auto k = cpu.lower({mm, view});
  ASSERT_EQ(k.size(), 2u);
  EXPECT_DOUBLE_EQ(k[0].host_s, 4e-6);
  EXPECT_DOUBLE_EQ(k[1].host_s, 1e-6);
}

TEST(ComputeCost, ParseExecution) {
  EXPECT_EQ(parse_execution("defer_and_fuse"), ExecutionMode::kDeferAndFuse);
  EXPECT_STREQ(execution_name(ExecutionMode::kEager), "eager");
  EXPECT_THROW(parse_execution("lazy"), Error);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
