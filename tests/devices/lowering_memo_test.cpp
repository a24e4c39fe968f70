// Tests for remembered lowerings: a run of a named trace's ops lowered again gives the kernels
// a fresh lowering gives, field for field, and is counted as found; an op marked resized (its
// sizes rewritten for another dp_shard degree) is lowered again from the op at hand, whether
// it was marked when the run was kept or only now; unnamed traces and runs that are not a
// named trace's consecutive ops are never looked up.
#include "devices/lowering_memo.h"

#include <gtest/gtest.h>

#include "devices/trace.h"
#include "tests/devices/transformer_trace.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

constexpr int64_t kMB = 1000 * 1000;

using testing::elementwise;

// A matmul, then a chain its epilogue may take (x -> a -> b, b read later), a view, another
// matmul and a chain over a shard-sized tensor s (an optimizer's update, say); named.
Trace named_trace() {
  Trace t;
  const TensorUse x{1, 64 * kMB}, a{2, 64 * kMB}, b{3, 64 * kMB}, s{4, 8 * kMB}, u{5, 8 * kMB};
  t.compute(matmul_op("aten::mm", {1, 4096, 4096, 4096}));
  t.compute(elementwise("aten::mul", {x}, {a}));
  t.compute(elementwise("aten::silu", {a}, {b}));
  OpDesc view = pointwise_op("aten::view", OpKind::kView, 0, 0);
  t.compute(std::move(view));
  t.compute(matmul_op("aten::mm", {1, 2048, 4096, 4096}));
  t.compute(elementwise("aten::add", {s, b}, {u}));
  t.compute(elementwise("aten::mul", {u}, {s}));
  t.compute(elementwise("aten::neg", {b}, {TensorUse{6, 64 * kMB}}));
  t.set_ops_id(Trace::new_content_id());
  return t;
}

std::vector<const OpDesc*> run_of(const Trace& t, size_t begin, size_t end) {
  std::vector<const OpDesc*> ops;
  for (size_t i = begin; i < end; ++i) ops.push_back(&t.events()[i].op);
  return ops;
}

void expect_same(const std::vector<Kernel>& a, const std::vector<Kernel>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("kernel " + std::to_string(i));
    EXPECT_EQ(a[i].category, b[i].category);
    EXPECT_EQ(a[i].exec_s, b[i].exec_s);
    EXPECT_EQ(a[i].compute_s, b[i].compute_s);
    EXPECT_EQ(a[i].memory_s, b[i].memory_s);
    EXPECT_EQ(a[i].launch_s, b[i].launch_s);
    EXPECT_EQ(a[i].host_s, b[i].host_s);
    EXPECT_EQ(a[i].flops, b[i].flops);
    EXPECT_EQ(a[i].bytes, b[i].bytes);
    EXPECT_EQ(a[i].ops, b[i].ops);
    EXPECT_EQ(a[i].basis, b[i].basis);
    EXPECT_EQ(a[i].lead, b[i].lead);
    EXPECT_EQ(a[i].chain, b[i].chain);
  }
}

std::vector<Kernel> fresh(const ComputeModel& m, const std::vector<const OpDesc*>& ops) {
  std::vector<Kernel> k;
  m.lower(ops, &k);
  return k;
}

// What shard resizing does to the shard-sized tensor s: its uses' sizes rewritten in place,
// the ops' byte counts following, each op marked and the trace's ops renamed.
void resize_shard(Trace* t, int64_t bytes) {
  t->mark_ops_resized();
  auto& events = const_cast<std::vector<TraceEvent>&>(t->events());
  for (TraceEvent& e : events) {
    OpDesc& op = e.op;
    bool touched = false;
    for (auto* uses : {&op.reads, &op.writes})
      for (TensorUse& u : *uses)
        if (u.id == 4 || u.id == 5) u.bytes = bytes, touched = true;
    if (!touched) continue;
    op.bytes_read = op.bytes_written = 0;
    for (const TensorUse& u : op.reads) op.bytes_read += u.bytes;
    for (const TensorUse& u : op.writes) op.bytes_written += u.bytes;
    op.resized = true;
  }
}

TEST(LoweringMemo, ARunFoundAgainHasTheKernelsAFreshLoweringGives) {
  for (ExecutionMode mode : {ExecutionMode::kDeferAndFuse, ExecutionMode::kCompiled, ExecutionMode::kEager}) {
    SCOPED_TRACE(execution_name(mode));
    const ComputeModel m(find_chip("tpu-v7"), mode);
    const Trace t = named_trace();
    LoweringMemo memo;
    std::vector<Kernel> out;
    const auto ops = run_of(t, 0, t.size());
    memo.lower(m, t.ops_id(), ops, &out);
    expect_same(out, fresh(m, ops));
    EXPECT_EQ(memo.misses, 1);
    out.clear();
    memo.lower(m, t.ops_id(), ops, &out);
    expect_same(out, fresh(m, ops));
    EXPECT_EQ(memo.hits, 1);
    // Another run of the same trace (its second half) is another entry.
    const auto tail = run_of(t, 4, t.size());
    memo.lower(m, t.ops_id(), tail, &out);
    expect_same(out, fresh(m, tail));
    EXPECT_EQ(memo.misses, 2);
  }
}

TEST(LoweringMemo, OpsMarkedResizedAreLoweredFromTheOpsAtHand) {
  for (ExecutionMode mode : {ExecutionMode::kDeferAndFuse, ExecutionMode::kCompiled}) {
    SCOPED_TRACE(execution_name(mode));
    const ComputeModel m(find_chip("tpu-v7"), mode);
    const Trace probe = named_trace();
    Trace at_16 = probe, at_2 = probe;  // copies keep the ops' name, as a resized step's traces do
    resize_shard(&at_16, 16 * kMB);
    resize_shard(&at_2, 2 * kMB);
    // Every resize of the probe names its ops alike, apart from the probe's own.
    EXPECT_EQ(at_16.ops_id(), at_2.ops_id());
    EXPECT_NE(at_16.ops_id(), probe.ops_id());
    const auto p = run_of(probe, 0, probe.size()), a = run_of(at_16, 0, at_16.size()),
               b = run_of(at_2, 0, at_2.size());
    // The shard's chain does cost differently at the two degrees (else this would show nothing).
    ASSERT_NE(fresh(m, a).back().bytes, fresh(m, b).back().bytes);

    LoweringMemo memo;
    std::vector<Kernel> out;
    memo.lower(m, at_16.ops_id(), a, &out);
    expect_same(out, fresh(m, a));
    memo.lower(m, at_2.ops_id(), b, &out);  // found; the marked ops' kernels lowered again
    expect_same(out, fresh(m, b));
    memo.lower(m, probe.ops_id(), p, &out);  // the probe's ops: another name
    expect_same(out, fresh(m, p));
    memo.lower(m, at_16.ops_id(), a, &out);
    expect_same(out, fresh(m, a));
    EXPECT_EQ(memo.hits, 2);
    EXPECT_EQ(memo.misses, 2);
  }
}

TEST(LoweringMemo, UnnamedOrNonConsecutiveRunsAreNotLookedUp) {
  const ComputeModel m(find_chip("tpu-v7"), ExecutionMode::kDeferAndFuse);
  Trace t = named_trace();
  LoweringMemo memo;
  std::vector<Kernel> out;
  const auto ops = run_of(t, 0, t.size());
  memo.lower(m, 0, ops, &out);
  memo.lower(m, 0, ops, &out);
  expect_same(out, fresh(m, ops));
  // Ops 0, 1, 2 and 5: not a run of the trace, so not named by its first op and length.
  const std::vector<const OpDesc*> gap = {ops[0], ops[1], ops[2], ops[5]};
  memo.lower(m, t.ops_id(), gap, &out);
  memo.lower(m, t.ops_id(), gap, &out);
  expect_same(out, fresh(m, gap));
  EXPECT_EQ(memo.hits + memo.misses, 0);
  // Any change through the trace drops the ops' name.
  t.compute(pointwise_op("aten::mul", OpKind::kElementwise, kMB, kMB));
  EXPECT_EQ(t.ops_id(), 0u);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
