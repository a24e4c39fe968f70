// Grouped GEMM cost (devices/grouped_matmul_cost.cpp): one kernel over the experts' products,
// whose tiles share the waves, against the same products as separate GEMMs.
#include <gtest/gtest.h>

#include <numeric>

#include "devices/compute_cost.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

// Device time of ops lowered as they run (kernel time plus each kernel's launch gap).
double lowered_s(const ComputeModel& model, const std::vector<OpDesc>& ops) {
  double s = 0;
  for (const Kernel& k : model.lower(ops)) s += k.exec_s + k.launch_s;
  return s;
}

std::vector<OpDesc> separate(const std::vector<MatmulShape>& groups) {
  std::vector<OpDesc> ops;
  for (const MatmulShape& g : groups) ops.push_back(matmul_op("aten::mm", g));
  return ops;
}

TEST(GroupedMatmulCost, OneProductCostsWhatThatGemmCosts) {
  for (const char* chip : {"h100", "tpu-v7", "trn2", "b200"}) {
    ComputeModel model(find_chip(chip), ExecutionMode::kDeferAndFuse);
    // Large, padded, and too small to fill the engines (split K).
    for (MatmulShape s : {MatmulShape{1, 8192, 8192, 8192}, MatmulShape{1, 4097, 768, 2048},
                          MatmulShape{1, 16, 4096, 4096}, MatmulShape{1, 100, 768, 37}}) {
      SCOPED_TRACE(std::string(chip) + " m " + std::to_string(s.m) + " k " + std::to_string(s.k));
      EXPECT_NEAR(model.grouped_matmul_efficiency({s}), model.matmul_efficiency(s), 1e-12);
      const OpDesc one = grouped_matmul_op("titan::grouped_mm", {s});
      const OpDesc mm = matmul_op("aten::mm", s);
      EXPECT_EQ(one.bytes_read, mm.bytes_read);
      EXPECT_EQ(one.bytes_written, mm.bytes_written);
      EXPECT_DOUBLE_EQ(one.flops, mm.flops);
      EXPECT_NEAR(lowered_s(model, {one}), lowered_s(model, {mm}), 1e-15);
    }
  }
}

// Qwen3-30B-A3B's expert products on one chip: 128 experts, dim 2048, expert ffn 768, 8192
// tokens x top-8 routed, uniform (512 rows each) or skewed; forward (gate / up), input gradient
// of the down projection and a weight gradient (K = the expert's rows).
TEST(GroupedMatmulCost, NoSlowerThanTheSeparateGemmsAndOneLaunch) {
  // Skewed: 8 hot experts take half the rows, the other 120 share the rest.
  std::vector<int64_t> uniform(128, 512), skewed(128, 273);
  for (int e = 0; e < 8; ++e) skewed[e] = 4096;
  skewed[8] += 8;
  for (const char* chip : {"h100", "tpu-v7", "trn2"}) {
    ComputeModel model(find_chip(chip), ExecutionMode::kDeferAndFuse);
    for (const auto* rows : {&uniform, &skewed}) {
      std::vector<MatmulShape> fwd, dw;
      for (int64_t m : *rows) fwd.push_back({1, m, 768, 2048}), dw.push_back({1, 768, 2048, m});
      for (const auto* groups : {&fwd, &dw}) {
        SCOPED_TRACE(std::string(chip) + (rows == &uniform ? " uniform" : " skewed") + (groups == &fwd ? " fwd" : " dw"));
        const OpDesc g = grouped_matmul_op("titan::grouped_mm", *groups);
        const std::vector<OpDesc> sep = separate(*groups);
        EXPECT_DOUBLE_EQ(g.flops, std::accumulate(sep.begin(), sep.end(), 0.0,
                                                  [](double a, const OpDesc& o) { return a + o.flops; }));
        // Each expert's weights are read once, as by its own GEMM.
        EXPECT_EQ(g.bytes_read, std::accumulate(sep.begin(), sep.end(), int64_t{0},
                                                [](int64_t a, const OpDesc& o) { return a + o.bytes_read; }));
        const std::vector<Kernel> ks = model.lower({g});
        ASSERT_EQ(ks.size(), 1u);
        EXPECT_LT(lowered_s(model, {g}), lowered_s(model, sep));
        // The launches saved: all but one of the separate kernels'.
        double sep_launch = 0;
        for (const Kernel& k : model.lower(sep)) sep_launch += k.launch_s;
        EXPECT_NEAR(sep_launch, 128 * ks[0].launch_s, 1e-12);
      }
    }
  }
}

// Why the weights' traffic matters for small m_e: at 512 rows per expert a forward product does
// 2 x 512 FLOPs per weight element read (2 bytes), below TPU v7's FLOPs per HBM byte, so the
// grouped kernel streams the experts' weights at the memory roofline; at 8x the rows (expert
// parallelism gathering 8 ranks' tokens per expert) the matrix units set its time.
TEST(GroupedMatmulCost, FewRowsPerExpertAreBoundByReadingTheWeights) {
  ComputeModel v7(find_chip("tpu-v7"), ExecutionMode::kDeferAndFuse);
  auto times = [&](int64_t rows) {
    std::vector<MatmulShape> fwd(128, MatmulShape{1, rows, 768, 2048});
    return v7.lower({grouped_matmul_op("titan::grouped_mm", fwd)})[0];
  };
  const Kernel few = times(512), many = times(4096);
  EXPECT_GT(few.memory_s, few.compute_s);
  EXPECT_LT(many.memory_s, many.compute_s);
  // 8x the rows, under 8x the time: the weights are read once either way.
  EXPECT_LT(many.exec_s, 8 * few.exec_s);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
