// Chrome trace-event export of a simulated step: the file parses as JSON and has one track
// per stream (host dispatch, compute, each collective kind and group), with events inside
// the step.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "study/evaluate.h"
#include "study_fixture.h"
#include "trainer/simulate/chrome_trace.h"

namespace titan::study {
namespace {

TEST(StudyTrace, ChromeTraceParsesWithExpectedTracks) {
  const JobConfig cfg = testing::tiny_config({"--parallelism.tensor_parallel_degree", "2"});
  RecordingCache cache;
  const auto rec = cache.get(cfg);
  const devices::ChipSpec chip = simulated_chip(cfg);
  const auto placement = devices::place_on_device(chip, 8, mesh_dims(rec->dims), "");
  const SimulationResult r = replay_step(cfg, *rec, chip, placement, /*keep_events=*/true);
  const std::string path = testing::tmp_dir("trace") + "/step.json";
  write_chrome_trace(path, r.report, "tiny");
  std::ifstream f(path);
  const nlohmann::json j = nlohmann::json::parse(f);
  std::set<std::string> tracks;
  int64_t complete = 0;
  double last_end_us = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") tracks.insert(e.at("args").at("name").get<std::string>());
    if (e.at("ph") == "X") {
      ++complete;
      EXPECT_GE(e.at("dur").get<double>(), 0);
      last_end_us = std::max(last_end_us, e.at("ts").get<double>() + e.at("dur").get<double>());
    }
  }
  EXPECT_TRUE(tracks.count("compute"));
  EXPECT_TRUE(tracks.count("host dispatch"));
  bool fsdp_gather = false, tp_collective = false;
  for (const auto& t : tracks) {
    fsdp_gather |= t.rfind("all_gather dp_shard", 0) == 0;
    tp_collective |= t.find(" tp ") != std::string::npos;
  }
  EXPECT_TRUE(fsdp_gather) << j.dump().substr(0, 2000);
  EXPECT_TRUE(tp_collective);
  int64_t timed = 0;  // tasks that took time (zero-length dispatches are not drawn)
  for (const auto& e : r.report.events) timed += e.end_s > e.start_s;
  EXPECT_EQ(complete, timed);
  EXPECT_GE(complete, r.report.kernels);
  EXPECT_NEAR(last_end_us, r.report.step_time_s * 1e6, 1e-3 * r.report.step_time_s * 1e6);
}

}  // namespace
}  // namespace titan::study
