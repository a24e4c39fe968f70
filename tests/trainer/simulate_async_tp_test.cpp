// parallelism.enable_async_tensor_parallel on the trainer's simulated step: under TP 8 with
// sequence parallelism on H100s the tensor-parallel collectives' exposed time and the step
// shrink while the work done stays the same; with TP 1, or without sequence parallelism, the
// key changes nothing. The replay mechanism itself: tests/devices/collective_matmul_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "trainer/config/config_loader.h"
#include "trainer/simulate/simulate.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

// A 2-layer model wide enough that its matmuls, not the host, set the pace on an H100.
JobConfig tp_config(const std::string& tp, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_8b.toml",
                                   "--job.dump_folder", "/tmp/titan_async_tp_test",
                                   "--model.n_layers", "2", "--model.dim", "2048", "--model.ffn_dim", "8192",
                                   "--model.n_heads", "16", "--model.n_kv_heads", "8", "--model.head_dim", "128",
                                   "--model.vocab_size", "32768", "--training.seq_len", "2048",
                                   "--training.local_batch_size", "2", "--simulation.num_chips", "64",
                                   "--simulation.device", "h100", "--simulation.execution", "compiled",
                                   "--parallelism.tensor_parallel_degree", tp};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

double category_s(const devices::StepReport& r, const std::string& name) {
  for (const auto& c : r.costs)
    if (c.category == name) return c.seconds;
  return 0;
}

// Seconds during which a tensor-parallel collective runs and no compute does.
double exposed_tp_s(const devices::StepReport& r) {
  std::vector<std::pair<double, double>> compute, tp;
  for (const auto& e : r.events) {
    if (e.kind == devices::StreamKind::kCompute && e.end_s > e.start_s) compute.push_back({e.start_s, e.end_s});
    const std::string& c = e.category;
    if (e.kind == devices::StreamKind::kCommunication && c.size() > 3 && c.compare(c.size() - 3, 3, " tp") == 0)
      tp.push_back({e.start_s, e.end_s});
  }
  std::sort(compute.begin(), compute.end());
  std::sort(tp.begin(), tp.end());
  std::vector<std::pair<double, double>> merged;  // union of tp intervals
  for (const auto& iv : tp) {
    if (!merged.empty() && iv.first <= merged.back().second) merged.back().second = std::max(merged.back().second, iv.second);
    else merged.push_back(iv);
  }
  double exposed = 0;
  size_t k = 0;
  for (const auto& iv : merged) {
    double covered = 0, at = iv.first;
    while (k < compute.size() && compute[k].second <= iv.first) ++k;
    for (size_t j = k; j < compute.size() && compute[j].first < iv.second; ++j) {
      const double lo = std::max(at, compute[j].first), hi = std::min(iv.second, compute[j].second);
      if (hi > lo) covered += hi - lo, at = hi;
    }
    exposed += iv.second - iv.first - covered;
  }
  return exposed;
}

TEST(SimulateAsyncTp, Tp8OnH100HidesTensorParallelCollectivesAndKeepsTheWork) {
  JobConfig off = tp_config("8");
  JobConfig on = off;
  on.parallelism.enable_async_tensor_parallel = true;
  RecordedStep rec = record_step(off);  // the key changes the replay, not the recording
  SimulationResult a = replay_step(off, rec, rec.chip, rec.placement, /*keep_events=*/true);
  SimulationResult b = replay_step(on, rec, rec.chip, rec.placement, /*keep_events=*/true);
  const double tp_a = exposed_tp_s(a.report), tp_b = exposed_tp_s(b.report);
  std::printf("  TP 8 h100: step %.4g -> %.4g ms, exposed tp %.4g -> %.4g ms, exposed comm %.4g -> %.4g ms\n",
              1e3 * a.report.step_time_s, 1e3 * b.report.step_time_s, 1e3 * tp_a, 1e3 * tp_b,
              1e3 * a.report.exposed_comm_s, 1e3 * b.report.exposed_comm_s);
  ASSERT_GT(tp_a, 0.05 * a.report.step_time_s) << "TP collectives should be exposed without async TP";
  EXPECT_LT(tp_b, 0.5 * tp_a);
  EXPECT_LT(b.report.exposed_comm_s, a.report.exposed_comm_s);
  EXPECT_LT(b.report.step_time_s, a.report.step_time_s);
  // The same work: matmul seconds, FLOPs, kernels, collectives, memory.
  EXPECT_NEAR(category_s(b.report, "matmul"), category_s(a.report, "matmul"), 1e-9 * category_s(a.report, "matmul"));
  EXPECT_NEAR(b.report.executed_flops, a.report.executed_flops, 1e-9 * a.report.executed_flops);
  EXPECT_EQ(b.report.kernels, a.report.kernels);
  EXPECT_EQ(b.report.collectives, a.report.collectives);
  EXPECT_EQ(b.memory.total, a.memory.total);
  // The chunked matmuls' rate is an assumption, and the report says so.
  const bool named = std::any_of(b.report.uncertain.begin(), b.report.uncertain.end(),
                                 [](const devices::CostItem& c) { return c.category.find("async TP") != std::string::npos; });
  EXPECT_TRUE(named);
}

TEST(SimulateAsyncTp, NoEffectWithoutTensorOrSequenceParallelism) {
  for (const auto& [tp, sp] : std::vector<std::pair<std::string, std::string>>{{"1", "true"}, {"8", "false"}}) {
    JobConfig off = tp_config(tp, {"--parallelism.enable_sequence_parallel", sp});
    JobConfig on = off;
    on.parallelism.enable_async_tensor_parallel = true;
    RecordedStep rec = record_step(off);
    SimulationResult a = replay_step(off, rec, rec.chip, rec.placement);
    SimulationResult b = replay_step(on, rec, rec.chip, rec.placement);
    EXPECT_EQ(b.report.step_time_s, a.report.step_time_s) << "tp " << tp << " sp " << sp;
    EXPECT_EQ(b.report.exposed_comm_s, a.report.exposed_comm_s) << "tp " << tp << " sp " << sp;
  }
}

TEST(SimulateAsyncTp, KeyIsTitansOwn) {
  JobConfig cfg = tp_config("8", {"--parallelism.enable_async_tensor_parallel", "true"});
  EXPECT_TRUE(cfg.parallelism.enable_async_tensor_parallel);
  EXPECT_FALSE(tp_config("8").parallelism.enable_async_tensor_parallel);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
