// Tests for devices/trace.h: the data flow Trace::compute links, and Trace::add_writes giving
// what recording the trace again with the writes in place gives (the recorder's late writes).
#include "devices/trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "common/error.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

OpDesc op(std::vector<TensorUse> reads, std::vector<TensorUse> writes, OpKind kind = OpKind::kElementwise) {
  OpDesc d;
  d.name = "aten::op";
  d.kind = kind;
  d.reads = std::move(reads);
  d.writes = std::move(writes);
  return d;
}

// The data flow of an op's reads or writes (TensorUse::flow), in order.
std::vector<int64_t> flows(const std::vector<TensorUse>& uses) {
  std::vector<int64_t> out;
  for (const TensorUse& u : uses) out.push_back(u.flow);
  return out;
}

// Every field the trace derives or carries, event by event.
void expect_same(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.compute_ops(), b.compute_ops());
  for (size_t i = 0; i < a.size(); ++i) {
    const TraceEvent &x = a.events()[i], &y = b.events()[i];
    ASSERT_EQ(x.type, y.type) << "event " << i;
    EXPECT_EQ(x.work, y.work) << "event " << i;
    EXPECT_EQ(x.op.index, y.op.index) << "event " << i;
    ASSERT_EQ(x.op.reads.size(), y.op.reads.size()) << "event " << i;
    ASSERT_EQ(x.op.writes.size(), y.op.writes.size()) << "event " << i;
    for (size_t r = 0; r < x.op.reads.size(); ++r) EXPECT_EQ(x.op.reads[r].id, y.op.reads[r].id);
    for (size_t w = 0; w < x.op.writes.size(); ++w) {
      EXPECT_EQ(x.op.writes[w].id, y.op.writes[w].id) << "event " << i << " write " << w;
      EXPECT_EQ(x.op.writes[w].bytes, y.op.writes[w].bytes) << "event " << i << " write " << w;
    }
    EXPECT_EQ(flows(x.op.reads), flows(y.op.reads)) << "event " << i;
    EXPECT_EQ(flows(x.op.writes), flows(y.op.writes)) << "event " << i;
  }
}

TEST(Trace, ComputeLinksReadersToTheirWriter) {
  Trace t;
  t.compute(op({}, {{1, 8}}));                  // 0 writes 1
  t.compute(op({{1, 8}}, {{1, 8}}, OpKind::kView));  // a view neither reads nor writes
  t.compute(op({{1, 8}}, {{2, 8}}));            // 1 reads 1 (from 0)
  t.compute(op({{1, 8}, {2, 8}}, {{1, 8}}));    // 2 reads 1 and 2, overwrites 1
  t.compute(op({{1, 8}}, {}));                  // 3 reads the new 1
  const auto& e = t.events();
  EXPECT_EQ(flows(e[0].op.writes), (std::vector<int64_t>{3}));
  EXPECT_EQ(flows(e[1].op.reads), (std::vector<int64_t>{-1}));
  EXPECT_EQ(flows(e[2].op.reads), (std::vector<int64_t>{0}));
  EXPECT_EQ(flows(e[2].op.writes), (std::vector<int64_t>{3}));
  EXPECT_EQ(flows(e[3].op.reads), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(flows(e[3].op.writes), (std::vector<int64_t>{4}));
  EXPECT_EQ(flows(e[4].op.reads), (std::vector<int64_t>{3}));
}

// Random traces over a few tensors (so that reads and writes of one tensor interleave, ids past
// the dense table and 0 included), with collectives between ops; late writes on random ops,
// some naming tensors other ops already touch. Trace `late` records the ops as they are and adds
// the writes after; `whole` records them with the writes in place from the start.
TEST(Trace, AddWritesLinksAsIfTheWritesHadBeenRecorded) {
  std::mt19937 rng(7);
  const std::vector<int64_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, int64_t{1} << 40, -3};
  auto pick = [&](int n) {
    std::vector<TensorUse> u;
    for (int k = static_cast<int>(rng() % static_cast<unsigned>(n + 1)); k > 0; --k)
      u.push_back({ids[rng() % ids.size()], static_cast<int64_t>(rng() % 100)});
    return u;
  };
  for (int round = 0; round < 50; ++round) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<OpDesc> ops;
    for (int i = 0; i < n; ++i) ops.push_back(op(pick(3), pick(2), rng() % 5 == 0 ? OpKind::kView : OpKind::kElementwise));
    std::vector<std::pair<int64_t, TensorUse>> writes;
    for (int k = static_cast<int>(rng() % 6); k > 0; --k)
      writes.push_back({static_cast<int64_t>(rng() % static_cast<unsigned>(n)), TensorUse{ids[rng() % ids.size()], 9}});
    // The reference: each op's late writes after its own, in op order then in the order given.
    std::vector<OpDesc> with = ops;
    std::vector<std::pair<int64_t, TensorUse>> sorted = writes;
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [i, u] : sorted) with[static_cast<size_t>(i)].writes.push_back(u);
    Trace whole, late;
    for (int i = 0; i < n; ++i) {
      if (i % 4 == 1) {
        for (Trace* t : {&whole, &late}) t->wait(t->issue({CollectiveKind::kAllGather, "dp_shard", 64, "comm"}));
      }
      whole.compute(with[static_cast<size_t>(i)]);
      late.compute(ops[static_cast<size_t>(i)]);
    }
    late.add_writes(writes);
    expect_same(whole, late);
    // Ops recorded afterwards link to the same writers.
    const OpDesc after = op({{1, 8}, {4, 8}, {int64_t{1} << 40, 8}, {-3, 8}, {7, 8}}, {{2, 8}});
    whole.compute(after);
    late.compute(after);
    expect_same(whole, late);
    if (HasFailure()) FAIL() << "round " << round;
  }
}

// A write to an op the trace does not hold is refused before any write is added, so the trace
// stays as it was (here the valid write to op 0 comes first in op order).
TEST(Trace, AddWritesWithABadOpIndexLeavesTheTraceAsItWas) {
  Trace t;
  t.compute(op({}, {{1, 8}}));
  t.compute(op({{1, 8}}, {{2, 8}}));
  const Trace before = t;
  for (const int64_t bad : {int64_t{2}, int64_t{-1}}) {
    EXPECT_THROW(t.add_writes({{0, TensorUse{3, 8}}, {bad, TensorUse{4, 8}}}), Error) << "op " << bad;
    expect_same(before, t);
  }
}

// take_events hands over what was recorded (a pipeline rank's segments move its ops) and leaves
// the storage table and an empty trace that records as a new one does.
TEST(Trace, TakeEventsHandsOverTheEventsAndKeepsTheStorages) {
  Trace t, fresh;
  t.compute(op({}, {{1, 8}}));
  t.wait(t.issue({CollectiveKind::kAllGather, "dp_shard", 64, "comm"}));
  t.compute(op({{1, 8}}, {{2, 8}}));
  t.storages() = {{8, true}, {8, false}};
  t.storage_resizes() = {{1, 2, 0}};
  const Trace before = t;
  const std::vector<TraceEvent> events = t.take_events();
  ASSERT_EQ(events.size(), before.size());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].type, before.events()[i].type) << "event " << i;
    EXPECT_EQ(events[i].work, before.events()[i].work) << "event " << i;
    EXPECT_EQ(flows(events[i].op.reads), flows(before.events()[i].op.reads)) << "event " << i;
    EXPECT_EQ(flows(events[i].op.writes), flows(before.events()[i].op.writes)) << "event " << i;
  }
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.compute_ops(), 0u);
  EXPECT_EQ(t.storages().size(), 2u);
  EXPECT_EQ(t.storage_resizes().size(), 1u);
  for (Trace* x : {&t, &fresh}) {
    x->compute(op({{1, 8}}, {{1, 8}}));  // no writer of 1 any more
    x->blocking({CollectiveKind::kAllReduce, "dp_shard", 64, "comm"});
  }
  expect_same(t, fresh);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
