// titan-study --search: every returned layout fits and its degrees multiply to the chip
// count, families with no fitting member say why, and the ranking is deterministic.
#include <gtest/gtest.h>

#include <ctime>
#include <set>

#include "common/error.h"
#include "study/layout_search.h"
#include "study/parallel_runner.h"
#include "study_fixture.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

using testing::small_hbm_chip_file;
using testing::tiny_config;

SearchSpace small_space() {
  SearchSpace s;
  s.tp = {1, 2, 3};  // 3 does not divide 8 chips
  s.pp = {1, 2};
  s.dp_replicate = {1, 2};
  s.local_batch = {1, 16};
  s.pp_microbatches = {1};
  s.schedules = {"1F1B"};
  s.activation_checkpoint = {"none", "full"};
  s.collective_modes = {"fused", "separate"};
  return s;
}

JobConfig small_hbm_config() {
  return tiny_config({"--simulation.chip_file", small_hbm_chip_file(), "--simulation.device", "small-hbm",
                      "--training.seq_len", "4096"});
}

TEST(StudySearch, ReturnsOnlyFittingLayoutsThatMultiplyToTheChipCount) {
  const JobConfig base = small_hbm_config();
  RecordingCache cache;
  const SearchResult r = search_layouts(base, small_space(), cache, 2, "");
  ASSERT_FALSE(r.ranked.empty());
  int64_t oom = 0;
  for (const auto& p : r.points) oom += p.verdict == Verdict::kDoesNotFit;
  EXPECT_GT(oom, 0) << "the test chip should make some layouts too big";
  double prev = 1e300;
  for (size_t i : r.ranked) {
    const Point& p = r.points[i];
    EXPECT_EQ(p.verdict, Verdict::kOk);
    EXPECT_TRUE(p.result.memory.fits) << p.result.memory.describe();
    const auto& d = p.result.dims;
    EXPECT_EQ(d.pp * d.dp_replicate * d.dp_shard * d.cp * d.tp, base.simulation.num_chips);
    EXPECT_LE(p.result.tokens_per_s_per_chip, prev);
    prev = p.result.tokens_per_s_per_chip;
  }
  // tp 3 is skipped for divisibility, and says so.
  bool divisibility = false;
  for (const auto& [fam, why] : r.rejected)
    divisibility |= fam.find("tp 3") != std::string::npos && why.find("divisibility") == 0;
  EXPECT_TRUE(divisibility);
  const std::string text = format_search(r, 5);
  EXPECT_NE(text.find("rejected families"), std::string::npos) << text;
}

TEST(StudySearch, SameVerdictsAcrossThreadCountsAndCaches) {
  // Two searches in one process with their own caches record every step twice. The
  // recorder's data-flow links follow tensor storages by address, so a recording depends
  // slightly on the heap's history (a second recording of one config in the same process
  // can differ by ~0.1% of the step); verdicts and rejected families do not. Byte-identical
  // output across thread counts, one process each, is checked in cli_test.cpp.
  const JobConfig base = small_hbm_config();
  RecordingCache c1, c2;
  const SearchResult a = search_layouts(base, small_space(), c1, 1, "");
  const SearchResult b = search_layouts(base, small_space(), c2, 2, "");
  ASSERT_EQ(a.points.size(), b.points.size());
  for (size_t i = 0; i < a.points.size(); ++i) {
    EXPECT_EQ(a.points[i].verdict, b.points[i].verdict) << i;
    const double t = a.points[i].result.report.step_time_s;
    EXPECT_NEAR(a.points[i].result.report.step_time_s, b.points[i].result.report.step_time_s, 0.02 * t) << i;
  }
  EXPECT_EQ(a.rejected, b.rejected);
}

TEST(StudySearch, RunStatsCountEveryThreadsCpuTime) {
  // Four jobs that each spin 30 ms of their thread's CPU time, on two threads: the run's CPU
  // time (titan-study prints it beside the rate) holds all four.
  auto spin = [](double s) {
    timespec t0{}, t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    while (static_cast<double>(t.tv_sec - t0.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec - t0.tv_nsec) < s);
  };
  const RunStats st = run_parallel(4, [&](int64_t) { spin(0.03); }, 2, "");
  EXPECT_EQ(st.jobs, 4);
  EXPECT_GE(st.cpu_s, 0.11);
  EXPECT_LT(st.cpu_s, 5.0);
  EXPECT_GT(st.wall_s, 0.0);
}

TEST(StudySearch, EnumerationCoversEveryDivisorLayoutOnce) {
  std::map<std::string, std::string> skipped;
  const auto c = enumerate_layouts(8, small_space(), skipped);
  // pp {1,2} x tp {1,2} x dp_replicate {1,2} divide 8: 8 families; tp 3: 4 skipped.
  // pp 1: 2 batch sizes; pp 2: 1 schedule x 1; each x 2 AC x 2 modes.
  EXPECT_EQ(c.size(), 4u * 2 * 4 + 4u * 1 * 4);
  EXPECT_EQ(skipped.size(), 4u);
  std::set<Overrides> unique;
  for (const auto& x : c) unique.insert(x.overrides);
  EXPECT_EQ(unique.size(), c.size());
}

TEST(StudySearch, OpLevelCheckpointingIsAChoiceOfItsOwn) {
  SearchSpace s = small_space();
  s.tp = {1};
  s.pp = {1};
  s.dp_replicate = {1};
  s.local_batch = {1};
  s.collective_modes = {"fused"};
  s.activation_checkpoint = {"selective", "op"};
  const JobConfig base = tiny_config();
  RecordingCache cache;
  const SearchResult r = search_layouts(base, s, cache, 1, "");
  ASSERT_EQ(r.points.size(), 2u);
  const Point &layer = r.points[0], &op = r.points[1];
  ASSERT_EQ(layer.verdict, Verdict::kOk) << layer.reason;
  ASSERT_EQ(op.verdict, Verdict::kOk) << op.reason;
  EXPECT_EQ(ac_choice(layer.cfg), "selective");
  EXPECT_EQ(ac_choice(op.cfg), "op");
  EXPECT_TRUE(op.cfg.activation_checkpoint.op_level());
  // Every block checkpointed (op) against every 2nd (selective): a different step, less memory.
  EXPECT_NE(layer.result.report.step_time_s, op.result.report.step_time_s);
  EXPECT_LT(op.result.memory.total_gib(), layer.result.memory.total_gib());
  EXPECT_NE(format_search(r, 2).find(" op "), std::string::npos) << format_search(r, 2);
  // From a base that asks for the op-level policy (a TorchTitan TOML), "selective" is still
  // every Nth block: the same two steps.
  const SearchResult from_op =
      search_layouts(tiny_config({"--activation_checkpoint.selective_ac_option", "op"}), s, cache, 1, "");
  ASSERT_EQ(from_op.points.size(), 2u);
  EXPECT_EQ(ac_choice(from_op.points[0].cfg), "selective");
  EXPECT_EQ(from_op.points[0].result.report.step_time_s, layer.result.report.step_time_s);
  EXPECT_EQ(from_op.points[1].result.report.step_time_s, op.result.report.step_time_s);
  // A choice the search does not know is refused, naming it.
  try {
    (void)search_space_from({{"activation_checkpoint", {"selective", "sac"}}}, "study.toml [search]");
    FAIL() << "an unknown AC choice was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'sac' is not an activation checkpointing choice"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
