// Fusion over the recorded data flow: a fused kernel reads from HBM what it did not produce
// and writes what a later op (a backward op, the next block) reads; eager moves everything.
#include <gtest/gtest.h>

#include "devices/step_simulator.h"
#include "tests/devices/transformer_trace.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

constexpr int64_t kMB = 1000 * 1000;

using testing::elementwise;

// x -> a = f(x) -> b = g(a) -> c = h(b, a); later an op reads a again (saved for backward).
std::vector<OpDesc> linked_ops(bool a_read_later) {
  Trace t;
  const TensorUse x{1, 100 * kMB}, a{2, 100 * kMB}, b{3, 100 * kMB}, c{4, 100 * kMB};
  t.compute(elementwise("aten::mul", {x}, {a}));
  t.compute(elementwise("aten::silu", {a}, {b}));
  t.compute(elementwise("aten::add", {b, a}, {c}));
  t.compute(matmul_op("aten::mm", {1, 1024, 1024, 1024}));  // breaks the chain
  if (a_read_later) t.compute(elementwise("aten::neg", {a}, {TensorUse{5, 100 * kMB}}));
  std::vector<OpDesc> ops;
  for (const TraceEvent& e : t.events()) ops.push_back(e.op);
  return ops;
}

TEST(FusionFlow, FusedKernelMovesOnlyWhatCrossesItsBoundary) {
  ComputeModel fused(find_chip("tpu-v7"), ExecutionMode::kDeferAndFuse);
  ComputeModel eager(find_chip("tpu-v7"), ExecutionMode::kEager);
  // Nobody reads a or b later: read x once, write c.
  auto k = fused.lower(linked_ops(false));
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].ops, 3);
  EXPECT_EQ(k[0].bytes, 200 * kMB);
  // a is read after the kernel (say by the backward): it must reach HBM too.
  auto ops = linked_ops(true);
  EXPECT_EQ(ops[0].writes[0].flow, 4);  // the trace linked a's writer to its last reader
  EXPECT_EQ(ops[2].reads[1].flow, 0);
  k = fused.lower(ops);
  ASSERT_EQ(k.size(), 3u);
  EXPECT_EQ(k[0].bytes, 300 * kMB);
  // Eager: every op reads its inputs and writes its output.
  auto e = eager.lower(linked_ops(false));
  EXPECT_EQ(e[0].bytes + e[1].bytes + e[2].bytes, (200 + 200 + 300) * kMB);
}

// tpu-v7: its compiler (XLA) fuses a matmul's consumers into it (chip_catalog.h).
TEST(FusionFlow, CompiledEpilogueReadsTheMatmulFromItsAccumulators) {
  Trace t;
  OpDesc mm = matmul_op("aten::mm", {1, 4096, 4096, 4096});
  const TensorUse out{7, mm.bytes_written}, act{8, mm.bytes_written};
  mm.writes = {out};
  t.compute(mm);
  t.compute(elementwise("aten::silu", {out}, {act}));
  std::vector<OpDesc> ops;
  for (const TraceEvent& e : t.events()) ops.push_back(e.op);
  auto k = ComputeModel(find_chip("tpu-v7"), ExecutionMode::kCompiled).lower(ops);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[1].bytes, act.bytes);  // only the write
  EXPECT_EQ(k[1].launch_s, 0.0);
  auto d = ComputeModel(find_chip("tpu-v7"), ExecutionMode::kDeferAndFuse).lower(ops);
  EXPECT_EQ(d[1].bytes, out.bytes + act.bytes);  // its own kernel: reads the matmul's output
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
