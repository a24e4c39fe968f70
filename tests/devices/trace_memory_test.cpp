// The memory walk over a recorded step (devices/trace_memory.h) on hand-built traces, and the
// memory report built from it.
#include "devices/trace_memory.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "devices/memory_model.h"
#include "tests/devices/transformer_trace.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

// An op reading and writing storages by id (bytes per use: the storage's size).
OpDesc op(const std::string& name, std::vector<int64_t> reads, std::vector<int64_t> writes, int64_t bytes = 100) {
  OpDesc d = pointwise_op(name, OpKind::kElementwise, bytes, bytes);
  for (int64_t id : reads) d.reads.push_back({id, bytes});
  for (int64_t id : writes) d.writes.push_back({id, bytes});
  return d;
}

TEST(TraceMemory, TemporariesLiveFromFirstToLastUse) {
  // 1: a parameter (outlives the step); 2 made by op 0, last read by op 3 (a saved tensor);
  // 3 made by op 1, last read by op 2; 4 made by op 4 after 2 and 3 are gone.
  Trace t;
  t.compute(op("aten::mm", {1}, {2}));
  t.compute(op("aten::silu", {2}, {3}));
  t.compute(op("aten::mul", {3}, {}));
  t.compute(op("aten::mm_backward", {2}, {}));
  t.compute(op("aten::add", {1}, {4}));
  t.storages() = {{1000, true}, {100, false}, {30, false}, {120, false}};
  const TraceMemory m = trace_memory(t).eager();
  EXPECT_EQ(m.state_bytes, 1000);
  EXPECT_EQ(m.peak_temporaries, 130);  // 2 and 3 at once (ops 1-2); 4 alone is 120
  EXPECT_EQ(m.peak_resized, 0);
  EXPECT_EQ(m.peak_op, 1);
  ASSERT_EQ(m.peak_by_op.size(), 2u);
  EXPECT_EQ(m.peak_by_op[0], std::make_pair(std::string("aten::mm"), int64_t{100}));
  EXPECT_EQ(m.peak_by_op[1], std::make_pair(std::string("aten::silu"), int64_t{30}));
}

TEST(TraceMemory, MakerIsTheFirstOpThatWritesData) {
  // A cast allocates its output (an allocation the recorder keeps as a metadata op) and then
  // writes it; a view of it follows. Named after the cast's copy, not the allocation.
  Trace t;
  OpDesc alloc = op("aten::empty_strided", {}, {2});
  alloc.kind = OpKind::kView;
  t.compute(alloc);
  t.compute(op("aten::copy_", {1}, {2}));
  OpDesc view = op("aten::view", {}, {2});
  view.kind = OpKind::kView;
  t.compute(view);
  t.compute(op("aten::mm", {2}, {}));
  t.storages() = {{100, true}, {100, false}};
  const TraceMemory m = trace_memory(t).eager();
  ASSERT_EQ(m.peak_by_op.size(), 1u);
  EXPECT_EQ(m.peak_by_op[0], std::make_pair(std::string("aten::copy_"), int64_t{100}));
  EXPECT_EQ(m.peak_temporaries, 100);
}

TEST(TraceMemory, ResizedBuffersCountOnlyWhileFilled) {
  // Storage 1: FSDP's gathered buffer, refilled before op 1 and freed before op 3 (it was
  // empty before the step); storage 2: a temporary over ops 0-3.
  Trace t;
  t.compute(op("aten::cast", {}, {2}));
  t.storage_resizes().push_back({static_cast<int64_t>(t.compute_ops()), 1, 500});
  t.compute(op("aten::mm", {1, 2}, {}));
  t.compute(op("aten::mm", {1}, {}));
  t.storage_resizes().push_back({static_cast<int64_t>(t.compute_ops()), 1, 0});
  t.compute(op("aten::add", {2}, {}));
  t.storages() = {{500, true}, {100, false}};
  const TraceMemory m = trace_memory(t).eager();
  EXPECT_EQ(m.state_bytes, 0);  // resized storages are buffers, not state, though they outlive the step
  EXPECT_EQ(m.peak_resized, 500);
  EXPECT_EQ(m.peak_temporaries, 100);
  EXPECT_EQ(m.peak_bytes, 600);
  EXPECT_EQ(m.peak_op, 1);
  // Freed first (a buffer full before the step): full until the free.
  Trace u;
  u.compute(op("aten::mm", {1}, {}));
  u.storage_resizes().push_back({1, 1, 0});
  u.compute(op("aten::add", {}, {2}));
  u.storages() = {{500, true}, {700, false}};
  const TraceMemory mu = trace_memory(u).eager();
  EXPECT_EQ(mu.peak_bytes, 700);  // 500 at op 0, then 700 alone
  EXPECT_EQ(mu.peak_op, 1);
}

TEST(TraceMemory, PerUseBuffersHoldMemoryFromFirstToLastUseWithTheNextInFlight) {
  // Two gathered weights (1: 400, 2: 300) refilled together before op 0 and freed before op 7,
  // as a unit-at-a-time FSDP does; 1 is used by ops 1-2, 2 by op 5. Temporaries: 3 (100) over
  // ops 0-3, 4 (600) over ops 4-6.
  Trace t;
  t.storage_resizes().push_back({0, 1, 400});
  t.storage_resizes().push_back({0, 2, 300});
  t.compute(op("aten::cast", {}, {3}));
  t.compute(op("aten::mm", {1}, {}));
  t.compute(op("aten::mm", {1}, {}));
  t.compute(op("aten::add", {3}, {}));
  t.compute(op("aten::cast", {}, {4}));
  t.compute(op("aten::mm", {2}, {}));
  t.compute(op("aten::add", {4}, {}));
  t.storage_resizes().push_back({7, 1, 0});
  t.storage_resizes().push_back({7, 2, 0});
  t.compute(op("aten::add", {}, {}));
  t.storages() = {{400, true}, {300, true}, {100, false}, {600, false}};
  const StepMemory walks = trace_memory(t);
  // The whole unit: both buffers with the second temporary (op 4).
  EXPECT_EQ(walks.eager().peak_bytes, 1300);
  EXPECT_EQ(walks.eager().peak_op, 4);
  // Per use: 1 over ops 1-2 and 2 over op 5, each also counted from the op before its first
  // use (in flight): op 4 holds 600 + 300 ahead, op 5 600 + 300; ops 1-2 400 + 300 + 100.
  const TraceMemory& used = walks.of(false, /*per_use=*/true);
  EXPECT_EQ(used.peak_bytes, 900);
  EXPECT_EQ(used.peak_op, 4);
  EXPECT_EQ(used.peak_resized, 300);
  EXPECT_EQ(used.peak_temporaries, 600);
  EXPECT_EQ(used.state_bytes, walks.eager().state_bytes);
}

// An op reading `reads` and writing `writes` as (storage id, bytes) pairs.
OpDesc op_sized(const std::string& name, std::vector<TensorUse> reads, std::vector<TensorUse> writes) {
  OpDesc d = pointwise_op(name, OpKind::kElementwise, 0, 0);
  d.reads = std::move(reads);
  d.writes = std::move(writes);
  return d;
}

TEST(TraceMemory, XlaFusesWideningCastsIntoTheirConsumers) {
  // 2 (bf16, 100 B) is made by a matmul and cast to fp32 (3, 200 B) by copy_; the fp32 copy is
  // read two matmuls later (a norm's backward). Under XLA's rules (per_use) the cast is
  // recomputed inside its consumer: 3 takes no memory and 2 lives until 3's last use.
  Trace t;
  t.compute(op_sized("aten::mm", {}, {{2, 100}}));
  t.compute(op_sized("aten::copy_", {{2, 100}}, {{3, 200}}));
  t.compute(op_sized("aten::mm", {}, {{4, 50}}));
  t.compute(op_sized("aten::mul", {{3, 200}, {4, 50}}, {}));
  // A narrowing cast (5: fp32 -> 6: bf16) stays as it is.
  t.compute(op_sized("aten::mm", {}, {{5, 400}}));
  t.compute(op_sized("aten::copy_", {{5, 400}}, {{6, 200}}));
  t.compute(op_sized("aten::mm", {{6, 200}}, {}));
  t.storages() = {{1000, true}, {100, false}, {200, false}, {50, false}, {400, false}, {200, false}};
  const StepMemory walks = trace_memory(t);
  EXPECT_EQ(walks.eager().peak_bytes, 600);  // 5 and 6 at the narrowing cast
  EXPECT_EQ(walks.eager().peak_by_op.size(), 2u);
  const LiveRanges live = live_ranges({&t}, t.storages(), t.storage_resizes());
  for (const LiveRange& r : live.ranges) EXPECT_EQ(r.cast_of, r.id == 3 ? 2 : 0) << "storage " << r.id;
  const TraceMemory& xla = walks.of(false, /*per_use=*/true);
  EXPECT_EQ(xla.peak_bytes, 600);  // the narrowing cast: unchanged
  // Before it: 3 at 200 + 4 at 50 unfused at op 3; under XLA 2 (100) + 4 (50).
  Trace head;
  for (int i = 0; i < 4; ++i) head.compute(t.events()[static_cast<size_t>(i)].op);
  head.storages() = {{1000, true}, {100, false}, {200, false}, {50, false}};
  const StepMemory head_walks = trace_memory(head);
  EXPECT_EQ(head_walks.eager().peak_bytes, 300);  // 2 and 3 at the cast
  const TraceMemory& fused_cast = head_walks.of(false, true);
  EXPECT_EQ(fused_cast.peak_bytes, 150);
  EXPECT_EQ(fused_cast.peak_op, 2);
  ASSERT_EQ(fused_cast.peak_by_op.size(), 1u);  // 2 and 4, both made by matmuls
  EXPECT_EQ(fused_cast.peak_by_op[0], std::make_pair(std::string("aten::mm"), int64_t{150}));
}

TEST(TraceMemory, XlaReduceScattersATiedWeightsGradientPerUse) {
  // 7: a tied weight's full-size gradient, made by the output projection's weight-gradient
  // matmul (op 0), accumulated by the embedding's backward (op 4, in place) and copied into
  // FSDP's reduce-scatter input 9 (op 5). 8: activations of the backward in between. Unit at a time
  // it is held across the backward; under XLA's rules each use's gradient is reduce-scattered
  // where it is made, so it holds nothing from op 1 to op 4.
  Trace t;
  OpDesc wgrad = op_sized("aten::mm", {}, {{7, 1000}});
  wgrad.kind = OpKind::kMatmul;
  t.compute(wgrad);
  OpDesc transpose = op_sized("aten::t", {{7, 1000}}, {{7, 1000}});  // a view of it: no use
  transpose.kind = OpKind::kView;
  t.compute(transpose);
  t.compute(op_sized("aten::mm", {}, {{8, 1500}}));
  t.compute(op_sized("aten::mul", {{8, 1500}}, {}));
  t.compute(op_sized("aten::add_", {{7, 1000}}, {{7, 1000}}));
  t.storage_resizes().push_back({5, 9, 100});
  t.compute(op_sized("aten::copy_", {{7, 1000}}, {{9, 100}}));
  t.storage_resizes().push_back({6, 9, 0});
  t.compute(op_sized("aten::neg", {}, {}));
  t.storages() = {{1, true}, {1, true}, {1, true}, {1, true}, {1, true}, {1, true},
                  {1000, false}, {1500, false}, {100, true}};
  const StepMemory walks = trace_memory(t);
  EXPECT_EQ(walks.eager().peak_bytes, 2500);  // 7 and 8 at op 2
  const TraceMemory& xla = walks.of(false, /*per_use=*/true);
  EXPECT_EQ(xla.peak_bytes, 1600);  // 8, and 9 gathered ahead of its use
  EXPECT_EQ(xla.peak_op, 2);
  for (const LiveRange& r : live_ranges({&t}, t.storages(), t.storage_resizes()).ranges)
    if (r.id == 7) EXPECT_TRUE(r.idle_from == 1 && r.idle_to == 4) << r.idle_from << " " << r.idle_to;
  // A gradient written once and copied at once keeps its whole range.
  Trace u;
  u.compute(wgrad);
  u.compute(op_sized("aten::mm", {}, {{8, 1500}}));
  u.storage_resizes().push_back({2, 9, 100});
  u.compute(op_sized("aten::copy_", {{7, 1000}}, {{9, 100}}));
  u.storages() = t.storages();
  for (const LiveRange& r : live_ranges({&u}, u.storages(), u.storage_resizes()).ranges)
    EXPECT_EQ(r.idle_from, r.idle_to) << "storage " << r.id;
}

TEST(TraceMemory, PartsWalkAsOneTrace) {
  Trace whole, a, b;
  const std::vector<OpDesc> ops = {op("aten::mm", {}, {1}), op("aten::silu", {1}, {2}), op("aten::mul", {2, 1}, {3}),
                                   op("aten::sum", {3}, {})};
  for (size_t i = 0; i < ops.size(); ++i) {
    whole.compute(ops[i]);
    (i < 2 ? a : b).compute(ops[i]);
  }
  const std::vector<StorageRecord> table = {{10, false}, {20, false}, {40, false}};
  const TraceMemory one = trace_memory({&whole}, table, {}).eager();
  const TraceMemory two = trace_memory({&a, &b}, table, {}).eager();
  EXPECT_EQ(one.peak_bytes, 70);
  EXPECT_EQ(two.peak_bytes, one.peak_bytes);
  EXPECT_EQ(two.peak_op, one.peak_op);
  // Sizes rewritten in the ranges walk again without the ops.
  LiveRanges live = live_ranges({&whole}, table, {});
  for (auto& r : live.ranges) r.bytes *= 3;
  EXPECT_EQ(walk_memory(live).peak_bytes, 210);
}

TEST(TraceMemory, FusedRunsKeepTheirTemporariesInRegisters) {
  // mm -> [cast, mul, sum] -> mm: the cast's and the mul's outputs live only inside the
  // element-wise run; the sum's output leaves it (read by the second matmul). A collective
  // between two element-wise ops ends a run, as in the replay.
  Trace t;
  t.compute(matmul_op("aten::mm", {1, 64, 64, 64}));
  t.compute(op("aten::to", {}, {1}));
  t.compute(op("aten::mul", {1}, {2}));
  t.compute(op("aten::sum", {2}, {3}));
  t.compute(op("aten::mm", {3}, {}));
  t.compute(op("aten::neg", {}, {4}));
  t.wait(t.issue({}));
  t.compute(op("aten::add", {4}, {}));
  t.storages() = {{100, false}, {200, false}, {10, false}, {50, false}};
  const StepMemory m = trace_memory(t);
  EXPECT_EQ(m.eager().peak_bytes, 300);  // 1 and 2 at the mul
  EXPECT_EQ(m.fused().peak_bytes, 50);   // only 3 (read after the run) and 4 (across the collective)
  ASSERT_EQ(m.fused().peak_by_op.size(), 1u);
  EXPECT_EQ(m.fused().peak_by_op[0].first, "aten::neg");
}

TEST(TraceMemory, ByteOverridesWalkAsRewrittenRanges) {
  // A resized recording walks its probe's ranges with some bytes overridden
  // (trainer/simulate/shard_resize.h): the same figures, in both modes, as the ranges rewritten.
  Trace t;
  OpDesc mm = op("aten::mm", {5}, {1});
  mm.kind = OpKind::kMatmul;  // ends the element-wise run that follows: 1 is allocated when fused
  t.compute(mm);
  t.compute(op("aten::mul", {1}, {2}));
  t.compute(op("aten::sum", {2}, {3}));
  t.compute(op("aten::neg", {3}, {4}));
  t.storages() = {{100, false}, {200, false}, {10, false}, {50, false}, {70, true}};
  auto live = std::make_shared<const LiveRanges>(live_ranges({&t}, t.storages(), {}));
  ASSERT_EQ(live->ranges.size(), 5u);
  LiveRanges rewritten = *live;
  std::vector<ByteOverride> overrides;
  for (uint32_t i : {0u, 2u, 4u}) overrides.push_back({i, rewritten.ranges[i].bytes *= 7});
  const StepMemory m(live, overrides);
  for (bool fused : {false, true}) {
    const TraceMemory want = walk_memory(rewritten, fused), got = m.of(fused);
    EXPECT_EQ(got.state_bytes, want.state_bytes) << fused;
    EXPECT_EQ(got.peak_bytes, want.peak_bytes) << fused;
    EXPECT_EQ(got.peak_op, want.peak_op) << fused;
    EXPECT_EQ(got.peak_by_op, want.peak_by_op) << fused;
    EXPECT_NE(got.peak_bytes, walk_memory(*live, fused).peak_bytes) << fused;  // the overrides count
  }
  EXPECT_EQ(m.eager().state_bytes, 490);  // the parameter's 70 bytes, seven times
  // Out of order or repeated: refused, naming the walk.
  EXPECT_THROW(walk_memory(*live, false, {{2, 1}, {2, 1}}), Error);
  EXPECT_THROW(walk_memory(*live, false, {{9, 1}}), Error);
}

TEST(TraceMemory, ReportSplitsStateAndRefusesWhatDoesNotFit) {
  TraceMemory m;
  m.state_bytes = 16000;  // params 4000 + optimizer 8000 + gradients 4000
  m.peak_temporaries = 20LL << 30;
  m.peak_resized = 1000;
  m.peak_by_op = {{"aten::_log_softmax", 12LL << 30}, {"aten::mm", 8LL << 30}};
  const ChipSpec v7 = find_chip("tpu-v7"), v5e = find_chip("tpu-v5e");
  const MemoryReport r = memory_of_step(m, 4000, 8000, v7);
  EXPECT_EQ(r.params, 4000);
  EXPECT_EQ(r.optimizer, 8000);
  EXPECT_EQ(r.grads, 4000);
  EXPECT_EQ(r.activations, 20LL << 30);
  EXPECT_EQ(r.collective_buffers, 1000);
  EXPECT_EQ(r.total, 16000 + (20LL << 30) + 1000 + (1LL << 30));  // + the runtime's reserve
  EXPECT_TRUE(r.fits);
  EXPECT_NO_THROW(require_fits(r, "8 x tpu-v7"));

  const MemoryReport small = memory_of_step(m, 4000, 8000, v5e);  // 16 GB
  ASSERT_FALSE(small.fits);
  EXPECT_NE(small.describe().find("DOES NOT FIT"), std::string::npos);
  const auto parts = small.consumers();
  EXPECT_EQ(parts[0].first, "activations");
  for (size_t i = 1; i < parts.size(); ++i) EXPECT_GE(parts[i - 1].second, parts[i].second);
  try {
    require_fits(small, "8 x tpu-v5e, dp_shard 8");
    FAIL() << "expected the layout to be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    const std::string w = e.what();
    EXPECT_NE(w.find("does not fit in memory (8 x tpu-v5e, dp_shard 8)"), std::string::npos) << w;
    EXPECT_NE(w.find("largest: activations"), std::string::npos) << w;
    EXPECT_NE(w.find("made by aten::_log_softmax 12.0 GiB, aten::mm 8.0 GiB"), std::string::npos) << w;
    EXPECT_NE(w.find("--simulation.allow_oom"), std::string::npos) << w;
  }
}

TEST(Qwen3Dims, ParameterCount) {
  ModelArgs d = testing::qwen3_8b_dims();
  // wq 4096x4096 + wk, wv 4096x1024 + wo 4096x4096 + 3 x 4096x12288 + 2 norms + q/k norms
  int64_t layer = 16777216 + 2 * 4194304 + 16777216 + 3 * 50331648 + 2 * 4096 + 2 * 128;
  EXPECT_EQ(d.layer_params(), layer);
  EXPECT_EQ(layer, 192946432);
  EXPECT_EQ(d.num_params(), 36 * layer + 2 * 151936LL * 4096 + 4096);
  EXPECT_EQ(d.num_params(), 8190735360);  // docs/models.md: 8.19B
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
