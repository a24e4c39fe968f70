// The recording cache between begin_points and end_points: the recorders stay within the
// lookahead of the points being evaluated, a point that waits for a recording queued for a
// later point has it made at once, and a lookup no point asked for within the lookahead is let
// go (and recorded again when asked for).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "study/evaluate.h"
#include "study_fixture.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

using testing::tiny_config;

// Three layouts with a probe each: dp_shard 4 at local batch 1, 2 and 4.
Overrides layout(int64_t local_batch) {
  return Overrides{{"parallelism.data_parallel_shard_degree", "4"},
                   {"simulation.num_chips", "4"},
                   {"training.local_batch_size", std::to_string(local_batch)}};
}

RecordingCache& plain(RecordingCache& cache) {
  cache.layer_extrapolation = false;  // one recording per point
  cache.derive_replicas = false;
  return cache;
}

bool waits_for(const std::function<bool()>& done) {
  for (int i = 0; i < 600 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return done();
}

TEST(RecordingOrder, RecordersStayWithinTheLookahead) {
  const JobConfig base = tiny_config();
  RecordingCache cache;
  plain(cache);
  cache.begin_points(1);
  std::vector<Prefetched> pre;
  for (int64_t k = 0; k < 3; ++k) {
    cache.prefetching_for(k);
    pre.push_back(prefetch(base, layout(int64_t{1} << k), cache));
  }
  cache.evaluating(0);
  const Point first = evaluate(base, layout(1), cache, &pre[0]);
  ASSERT_EQ(first.verdict, Verdict::kOk) << first.reason;
  // Point 1's recording may be made now; point 2's not before point 1 is evaluated (a tiny
  // step records in well under the time given here).
  ASSERT_TRUE(waits_for([&] { return cache.recordings() >= 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(cache.recordings(), 2);
  for (int64_t k = 1; k < 3; ++k) {
    cache.evaluating(k);
    const Point p = evaluate(base, layout(int64_t{1} << k), cache, &pre[k]);
    EXPECT_EQ(p.verdict, Verdict::kOk) << p.reason;
  }
  EXPECT_EQ(cache.recordings(), 3);
  cache.end_points();
}

TEST(RecordingOrder, APointWaitingForALaterPointsRecordingHasItMadeAtOnce) {
  const JobConfig base = tiny_config();
  RecordingCache cache;
  plain(cache);
  cache.begin_points(1);
  cache.prefetching_for(5);
  Prefetched later = prefetch(base, layout(2), cache);
  cache.evaluating(0);
  // A lookup of the same probe, beyond the lookahead where it is queued.
  const Point now = evaluate(base, layout(2), cache);
  ASSERT_EQ(now.verdict, Verdict::kOk) << now.reason;
  EXPECT_EQ(cache.recordings(), 1);
  cache.evaluating(5);
  const Point p = evaluate(base, layout(2), cache, &later);
  EXPECT_EQ(p.verdict, Verdict::kOk) << p.reason;
  EXPECT_EQ(cache.recordings(), 1);
  EXPECT_EQ(p.result.report.step_time_s, now.result.report.step_time_s);
  cache.end_points();
}

TEST(RecordingOrder, ALookupIsLetGoOnceNoPointAskedForItWithinTheLookahead) {
  const JobConfig base = tiny_config();
  RecordingCache cache;
  plain(cache);
  cache.begin_points(1);
  cache.evaluating(0);
  const Point first = evaluate(base, layout(1), cache);
  ASSERT_EQ(first.verdict, Verdict::kOk) << first.reason;
  EXPECT_EQ(cache.probes_held(), 1u);
  cache.evaluating(1);
  EXPECT_EQ(cache.probes_held(), 1u);  // looked up one point ago
  cache.evaluating(3);
  EXPECT_EQ(cache.probes_held(), 0u);
  const Point again = evaluate(base, layout(1), cache);
  ASSERT_EQ(again.verdict, Verdict::kOk) << again.reason;
  EXPECT_EQ(cache.recordings(), 2);
  EXPECT_EQ(again.result.report.step_time_s, first.result.report.step_time_s);
  cache.end_points();
  // Outside begin_points .. end_points nothing is let go.
  cache.evaluating(100);
  EXPECT_EQ(cache.probes_held(), 1u);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
