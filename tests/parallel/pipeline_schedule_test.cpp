// Pipeline schedules as data: every named schedule over several (ranks, stages,
// micro-batches) is well ordered, its sends meet its receives and it cannot deadlock; the
// replayed bubble of GPipe / 1F1B / Interleaved1F1B matches the closed forms; bad input is
// a clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "common/error.h"
#include "parallel/pipeline_schedule.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

using devices::P2PMode;

struct Case {
  std::string name;
  int ranks, stages_per_rank, microbatches;
};

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (int p : {1, 2, 3, 4}) {
    for (int m : {1, 2, 3, 4, 8}) {
      out.push_back({"GPipe", p, 1, m});
      out.push_back({"1F1B", p, 1, m});
      out.push_back({"InterleavedZeroBubble", p, 1, m});
      out.push_back({"ZBVZeroBubble", p, 2, m});
    }
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p, 3 * p}) {
        out.push_back({"Interleaved1F1B", p, v, m});
        out.push_back({"InterleavedZeroBubble", p, v, m});
      }
    }
  }
  return out;
}

std::string label(const Case& c) {
  return c.name + " p=" + std::to_string(c.ranks) + " v=" + std::to_string(c.stages_per_rank) +
         " m=" + std::to_string(c.microbatches);
}

// Checks the lists directly (not through validate_pipeline_schedule).
void check_schedule(const PipeSchedule& s, const std::string& what) {
  std::map<std::string, std::pair<int, size_t>> where;  // action text -> (rank, index)
  std::multiset<std::tuple<int, int, int, int>> sends, recvs;  // (channel, from stage, to stage, mb)
  for (int r = 0; r < s.num_ranks; ++r) {
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      const PipeAction& a = s.ranks[r][i];
      EXPECT_EQ(s.stage_rank[a.stage], r) << what << " " << a.to_string();
      EXPECT_TRUE(where.insert({a.to_string(), {r, i}}).second) << what << ": " << a.to_string() << " twice";
      const int k = a.microbatch;
      if (a.op == PipeOp::kSendF) sends.insert({0, a.stage, a.stage + 1, k});
      if (a.op == PipeOp::kRecvF) recvs.insert({0, a.stage - 1, a.stage, k});
      if (a.op == PipeOp::kSendB) sends.insert({1, a.stage, a.stage - 1, k});
      if (a.op == PipeOp::kRecvB) recvs.insert({1, a.stage + 1, a.stage, k});
    }
  }
  EXPECT_EQ(sends, recvs) << what << ": sends and receives differ";
  for (const auto& [ch, from, to, k] : sends) EXPECT_NE(s.stage_rank[from], s.stage_rank[to]) << what;
  const bool zb = s.split_backward();
  for (int g = 0; g < s.num_stages; ++g) {
    for (int k = 0; k < s.num_microbatches; ++k) {
      auto f = where.find(PipeAction{PipeOp::kForward, g, k}.to_string());
      auto b = where.find(PipeAction{zb ? PipeOp::kBackwardInput : PipeOp::kBackward, g, k}.to_string());
      ASSERT_TRUE(f != where.end() && b != where.end()) << what << " stage " << g << " mb " << k;
      EXPECT_LT(f->second.second, b->second.second) << what << ": forward after backward, stage " << g << " mb " << k;
      if (zb) {
        auto w = where.find(PipeAction{PipeOp::kBackwardWeight, g, k}.to_string());
        ASSERT_TRUE(w != where.end()) << what;
        EXPECT_LT(b->second.second, w->second.second) << what;
      }
    }
  }
  // No deadlock when every send and receive blocks until its peer arrives, nor when they
  // run asynchronously (fused mode: queued in order, or posted).
  auto unit = [](const PipeAction& a) { return a.compute() ? unit_cost(a.op) : 0.0; };
  auto free_p2p = [](const PipeAction&) { return 0.0; };
  for (P2PMode mode : {P2PMode::kBlocking, P2PMode::kAsync, P2PMode::kPosted}) {
    auto res = devices::replay_pipeline(pipeline_steps(s, mode, unit, free_p2p), mode);
    EXPECT_FALSE(res.deadlock) << what;
  }
}

TEST(PipelineSchedule, EveryScheduleIsOrderedMatchedAndDeadlockFree) {
  for (const Case& c : all_cases()) {
    for (bool fsdp : {false, true}) {
      PipeSchedule s =
          make_pipeline_schedule(c.name, c.ranks, c.ranks * c.stages_per_rank, c.microbatches, fsdp);
      check_schedule(s, label(c));
      int reduces = 0;
      for (const auto& list : s.ranks)
        for (const auto& a : list) reduces += a.op == PipeOp::kReduceGrad;
      EXPECT_EQ(reduces, fsdp ? s.num_stages : 0) << label(c);
    }
  }
}

TEST(PipelineSchedule, PlacementLoopAndV) {
  auto loop = make_pipeline_schedule("Interleaved1F1B", 3, 6, 3);
  EXPECT_EQ(loop.stages_of(1), (std::vector<int>{1, 4}));
  auto v = make_pipeline_schedule("ZBVZeroBubble", 3, 6, 3);
  EXPECT_EQ(v.stages_of(0), (std::vector<int>{0, 5}));
  EXPECT_EQ(v.stages_of(2), (std::vector<int>{2, 3}));
  EXPECT_TRUE(v.split_backward());
  EXPECT_FALSE(loop.split_backward());
}

double unit_bubble(const PipeSchedule& s, double stage_scale) {
  auto cost = [&](const PipeAction& a) { return a.compute() ? unit_cost(a.op) * stage_scale : 0.0; };
  auto free_p2p = [](const PipeAction&) { return 0.0; };
  auto res = devices::replay_pipeline(pipeline_steps(s, P2PMode::kAsync, cost, free_p2p), P2PMode::kAsync);
  EXPECT_FALSE(res.deadlock);
  return res.bubble_fraction;
}

TEST(PipelineSchedule, BubbleMatchesClosedForms) {
  for (int p : {2, 3, 4, 8}) {
    for (int m : {1, 4, 8, 16}) {
      const double expected = double(p - 1) / (m + p - 1);
      EXPECT_NEAR(unit_bubble(make_pipeline_schedule("GPipe", p, p, m), 1.0), expected, 1e-12) << p << " " << m;
      EXPECT_NEAR(unit_bubble(make_pipeline_schedule("1F1B", p, p, m), 1.0), expected, 1e-12) << p << " " << m;
      for (int v : {2, 4}) {
        if (m % p != 0) continue;
        // v stages per rank, each 1/v of the work: the fill and drain shrink v-fold.
        auto s = make_pipeline_schedule("Interleaved1F1B", p, p * v, m);
        EXPECT_NEAR(unit_bubble(s, 1.0 / v), double(p - 1) / (v * m + p - 1), 1e-12) << p << " " << v << " " << m;
      }
    }
  }
}

TEST(PipelineSchedule, ZeroBubbleSchedulesBeatOneFOneB) {
  // Same work per micro-batch (B = I + W); the split lets W fill the waits.
  for (int p : {2, 4, 8}) {
    const int m = 2 * p;
    const double one = unit_bubble(make_pipeline_schedule("1F1B", p, p, m), 1.0);
    EXPECT_LT(unit_bubble(make_pipeline_schedule("InterleavedZeroBubble", p, p, m), 1.0), one) << p;
    EXPECT_LT(unit_bubble(make_pipeline_schedule("ZBVZeroBubble", p, 2 * p, m), 0.5), one) << p;
  }
}

TEST(PipelineSchedule, InFlightMicrobatches) {
  EXPECT_EQ(peak_in_flight(make_pipeline_schedule("GPipe", 4, 4, 6)), (std::vector<int>{6, 6, 6, 6}));
  EXPECT_EQ(peak_in_flight(make_pipeline_schedule("1F1B", 4, 4, 6)), (std::vector<int>{4, 3, 2, 1}));
}

TEST(PipelineSchedule, ActionTextRoundTrips) {
  for (const char* t : {"0F3", "12B0", "1I2", "1W2", "0SEND_F1", "3RECV_B2", "2SEND_B0", "1RECV_F7", "1REDUCE_GRAD",
                        "0UNSHARD", "4RESHARD"}) {
    EXPECT_EQ(parse_pipe_action(t, "test").to_string(), t);
  }
}

void expect_config_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error, expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PipelineSchedule, BadInputIsAClearError) {
  expect_config_error([] { make_pipeline_schedule("2F2B", 2, 2, 2); }, "unknown schedule '2F2B'");
  expect_config_error([] { make_pipeline_schedule("Interleaved1F1B", 4, 8, 6); },
                      "needs a multiple of the 4 pipeline ranks as micro-batches, got 6");
  expect_config_error([] { make_pipeline_schedule("1F1B", 2, 4, 4); }, "runs one stage per rank");
  expect_config_error([] { make_pipeline_schedule("ZBVZeroBubble", 2, 2, 4); }, "exactly 2 stages per rank");
  expect_config_error([] { make_pipeline_schedule("GPipe", 2, 3, 4); }, "do not divide over 2 pipeline ranks");
  expect_config_error([] { parse_pipe_action("0X1", "f.csv:3"); }, "f.csv:3: unknown pipeline action '0X1'");
  expect_config_error([] { parse_pipe_action("F1", "f.csv:3"); }, "must start with a stage number");
  expect_config_error([] { parse_pipe_action("0SEND_F", "f.csv:3"); }, "needs a micro-batch number");
}

std::string write_csv(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("titan_pp_" + name + ".csv");
  std::ofstream(path) << text;
  return path.string();
}

TEST(PipelineScheduleCsv, ComputeOnlyGetsSendsAndReceives) {
  const std::string path = write_csv("compute_only",
                                     "# a 2-rank 1F1B written by hand\n"
                                     "0F0, 0F1, 0B0, 0B1\n"
                                     "1F0, 1B0, 1F1, 1B1\n");
  PipeSchedule s = load_pipeline_schedule_csv(path, 2, 2);
  EXPECT_EQ(s.num_stages, 2);
  EXPECT_TRUE(s.has_p2p());
  check_schedule(s, path);
}

TEST(PipelineScheduleCsv, ExplicitSendsAreKeptAndChecked) {
  const std::string ok = write_csv("explicit_ok",
                                   "0F0,0SEND_F0,0RECV_B0,0B0\n"
                                   "1RECV_F0,1F0,1B0,1SEND_B0\n");
  PipeSchedule s = load_pipeline_schedule_csv(ok, 2, 1);
  EXPECT_EQ(s.ranks[0][1].to_string(), "0SEND_F0");
  // Rank 0 sends micro-batch 1 before taking micro-batch 0's gradient; rank 1 sends that
  // gradient before taking micro-batch 1: both block in their sends.
  const std::string dead = write_csv("explicit_deadlock",
                                     "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                                     "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n");
  expect_config_error([&] { load_pipeline_schedule_csv(dead, 2, 2); },
                      "deadlocks when sends and receives block until their peer meets them: rank 0 waits at 0SEND_F1");
}

TEST(PipelineScheduleCsv, BadFilesAreClearErrors) {
  // Rank 1 runs stage 3's forward before stage 1's, which stage 3 depends on.
  const std::string cycle = write_csv("cycle", "0F0,2F0,2B0,0B0\n3F0,1F0,3B0,1B0\n");
  expect_config_error([&] { load_pipeline_schedule_csv(cycle, 2, 1); }, "deadlocks: its compute order waits in a cycle");
  const std::string missing = write_csv("missing", "0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n");
  expect_config_error([&] { load_pipeline_schedule_csv(missing, 2, 2); }, "0B1 (backward) is missing");
  const std::string order = write_csv("order", "0F0,0B0\n1B0,1F0\n");
  expect_config_error([&] { load_pipeline_schedule_csv(order, 2, 1); }, "1F0 must come before 1B0");
  const std::string lines = write_csv("lines", "0F0,0B0\n");
  expect_config_error([&] { load_pipeline_schedule_csv(lines, 2, 1); }, "1 action lines, but pipeline_parallel_degree is 2");
  const std::string twice = write_csv("twice", "0F0,0B0,1F0\n1B0\n");
  expect_config_error([&] { load_pipeline_schedule_csv(twice, 2, 1); }, "stage 1 appears on rank 0 and on rank 1");
  expect_config_error([&] { load_pipeline_schedule_csv("/nonexistent/x.csv", 2, 1); }, "cannot read");
}

TEST(PipelineSchedule, PrintsATimeline) {
  const std::string text = format_pipeline_schedule(make_pipeline_schedule("1F1B", 2, 2, 3));
  EXPECT_NE(text.find("rank 0 |"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1 actions: 1RECV_F0 1F0"), std::string::npos) << text;
  EXPECT_NE(text.find("bubble fraction 0.25"), std::string::npos) << text;  // (2-1)/(3+2-1)
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
