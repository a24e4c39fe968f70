// Tests for the discrete-event timeline: in-order streams, dependencies, overlap accounting.
#include "devices/timeline.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

TimelineTask task(int stream, double d, std::vector<int64_t> deps = {}, std::string cat = "c") {
  TimelineTask t;
  t.stream = stream;
  t.duration_s = d;
  t.deps = std::move(deps);
  t.category = std::move(cat);
  return t;
}

TEST(Timeline, CommunicationOverlapsIndependentCompute) {
  Timeline tl;
  int comp = tl.add_stream("compute", false);
  int comm = tl.add_stream("comm", true);
  int64_t a = tl.add(task(comp, 1.0, {}, "matmul"));
  int64_t c = tl.add(task(comm, 2.0, {a}, "all_gather"));  // needs a's output
  int64_t b = tl.add(task(comp, 1.0, {}, "matmul"));       // independent: overlaps c
  EXPECT_DOUBLE_EQ(tl.timing(c).start_s, 1.0);
  EXPECT_DOUBLE_EQ(tl.timing(b).start_s, 1.0);
  EXPECT_DOUBLE_EQ(tl.timing(b).end_s, 2.0);
  TimelineSummary s = tl.summarize();
  EXPECT_DOUBLE_EQ(s.makespan_s, 3.0);
  EXPECT_DOUBLE_EQ(s.compute_busy_s, 2.0);
  EXPECT_DOUBLE_EQ(s.comm_busy_s, 2.0);
  EXPECT_DOUBLE_EQ(s.exposed_comm_s, 1.0);  // [2, 3]: compute has nothing left
  EXPECT_DOUBLE_EQ(s.exposed_comm_fraction, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.idle_s, 0.0);
  ASSERT_EQ(s.categories.size(), 2u);
  EXPECT_EQ(s.categories[0].first, "all_gather");
  EXPECT_DOUBLE_EQ(s.categories[0].second, 2.0);
  EXPECT_DOUBLE_EQ(s.categories[1].second, 2.0);
}

TEST(Timeline, DependenciesAndReadyTimes) {
  Timeline tl;
  int comp = tl.add_stream("compute", false);
  int comm = tl.add_stream("comm", true);
  int64_t c = tl.add(task(comm, 2.0));
  int64_t d = tl.add(task(comp, 0.5, {c}));  // waits for the collective
  EXPECT_DOUBLE_EQ(tl.timing(d).start_s, 2.0);
  TimelineTask late = task(comp, 1.0);
  late.ready_s = 4.0;  // the host dispatched it at t = 4
  late.overhead_s = 0.25;
  int64_t e = tl.add(late);
  EXPECT_DOUBLE_EQ(tl.timing(e).start_s, 4.0);
  TimelineSummary s = tl.summarize();
  EXPECT_DOUBLE_EQ(s.makespan_s, 5.0);
  EXPECT_DOUBLE_EQ(s.exposed_comm_s, 2.0);
  EXPECT_DOUBLE_EQ(s.idle_s, 1.5);  // [2.5, 4]: nothing runs
  double overhead = 0;
  for (const auto& c2 : s.categories)
    if (c2.first == "launch overhead") overhead = c2.second;
  EXPECT_DOUBLE_EQ(overhead, 0.25);
  EXPECT_EQ(s.streams.size(), 2u);
  EXPECT_DOUBLE_EQ(s.streams[1].busy_s, 2.0);
}

TEST(Timeline, StreamsAreInOrder) {
  Timeline tl;
  int comm = tl.add_stream("comm", true);
  int comp = tl.add_stream("compute", false);
  int64_t a = tl.add(task(comp, 3.0));
  tl.add(task(comm, 1.0, {a}));          // [3, 4]
  int64_t second = tl.add(task(comm, 1.0));  // FIFO behind it though it has no deps
  EXPECT_DOUBLE_EQ(tl.timing(second).start_s, 4.0);
  EXPECT_THROW(tl.add(task(comp, 1.0, {99})), Error);
  EXPECT_THROW(tl.add(task(7, 1.0)), Error);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
