// titan-study sweeps: the sweep file's combinations become the expected rows (CSV, JSONL),
// plots are valid PNG files, results do not depend on threads or the recording cache, and
// one recording serves every device and chip count with the same per-rank step.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "study/plots.h"
#include "study/results_io.h"
#include "study/sweep_runner.h"
#include "study_fixture.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

using testing::tiny_config;
using testing::tmp_dir;

const char* kSweep = R"(
[study]
name = "tiny"
x = "simulation.num_chips"
[sweep]
"simulation.num_chips" = [4, 8, 16]
"comm.collective_mode" = ["fused", "separate"]
[fixed]
"activation_checkpoint.mode" = "none"
)";

std::vector<std::string> lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

TEST(StudySweep, FileExpandsToCombinationsInFileOrder) {
  const SweepFile s = parse_sweep(kSweep, "tiny.toml");
  ASSERT_EQ(s.axes.size(), 2u);
  EXPECT_EQ(s.axes[0].first, "simulation.num_chips");  // file order, not toml++'s sorted order
  const auto combos = s.combinations();
  ASSERT_EQ(combos.size(), 6u);
  EXPECT_EQ(combos[0], (Overrides{{"activation_checkpoint.mode", "none"}, {"simulation.num_chips", "4"},
                                  {"comm.collective_mode", "fused"}}));
  EXPECT_EQ(combos[5].back(), (std::pair<std::string, std::string>{"comm.collective_mode", "separate"}));
  EXPECT_THROW(parse_sweep("[sweep]\n", "empty.toml"), Error);
  EXPECT_THROW(parse_sweep("[swep]\nx = [1]\n", "typo.toml"), Error);
  EXPECT_THROW(parse_sweep("[study]\nx = \"a.b\"\n[sweep]\n\"c.d\" = [1]\n", "x.toml"), Error);
}

TEST(StudySweep, ProducesExpectedRowsAndPngPlots) {
  const SweepFile s = parse_sweep(kSweep, "tiny.toml");
  RecordingCache cache;
  const SweepRun run = run_sweep(tiny_config(), s.combinations(), cache, 2, "");
  ASSERT_EQ(run.points.size(), 6u);
  for (const auto& p : run.points) {
    EXPECT_EQ(p.verdict, Verdict::kOk) << p.reason;
    EXPECT_GT(p.result.mfu_percent, 0);
    const auto& b = p.breakdown;
    // idle_s is what the other parts leave of the step (breakdown_of), so the parts add up by
    // construction; what can go wrong is parts that overrun the step (time counted twice).
    EXPECT_LE(b.compute_s + b.exposed_comm_s + b.bubble_s, p.result.report.step_time_s * (1 + 1e-9));
    // The exposed time split by collective kind adds up to it; separate mode exposes some.
    double by_kind = 0;
    for (const auto& k : b.exposed_by_kind) by_kind += k.seconds;
    EXPECT_NEAR(by_kind, b.exposed_comm_s, 1e-9 * p.result.report.step_time_s);
    if (p.cfg.comm.collective_mode == CollectiveMode::kSeparate) EXPECT_FALSE(b.exposed_by_kind.empty());
  }
  EXPECT_EQ(run.points[2].cfg.simulation.num_chips, 8);
  EXPECT_EQ(run.points[3].cfg.comm.collective_mode, CollectiveMode::kSeparate);
  // Fused is never slower than separate at the same chip count (equal up to rounding when
  // nothing overlaps).
  for (size_t i = 0; i < 6; i += 2)
    EXPECT_LE(run.points[i].result.report.step_time_s, run.points[i + 1].result.report.step_time_s * (1 + 1e-9));

  const std::string dir = tmp_dir("sweep");
  std::filesystem::remove_all(dir);
  PriceTable prices = read_prices(default_prices_path());
  std::vector<std::string> keys = {"simulation.num_chips", "comm.collective_mode"};
  const std::string csv = write_results(dir, keys, run.points, prices);
  const auto rows = lines(csv);
  ASSERT_EQ(rows.size(), 7u);  // header + 6
  EXPECT_EQ(rows[0].rfind("simulation.num_chips,comm.collective_mode,device,num_chips", 0), 0u) << rows[0];
  EXPECT_EQ(rows[1].rfind("4,fused,tpu-v5p,4,1,1,4,1,fused", 0), 0u) << rows[1];
  const auto jl = lines(dir + "/results.jsonl");
  ASSERT_EQ(jl.size(), 6u);
  const auto j = nlohmann::json::parse(jl[5]);
  EXPECT_EQ(j["comm.collective_mode"], "separate");
  EXPECT_EQ(j["num_chips"], 16);
  EXPECT_EQ(j["verdict"], "ok");
  EXPECT_GT(j["usd_per_million_tokens"].get<double>(), 0);  // tpu-v5p has a price

  if (find_gnuplot().empty()) GTEST_SKIP() << "gnuplot not installed (launch/setup installs gnuplot-nox)";
  const auto pngs = draw_plots(dir, "tiny", s.x_key, keys, run.points);
  ASSERT_EQ(pngs.size(), 2u);
  for (const auto& png : pngs) {
    EXPECT_TRUE(is_png(png)) << png;
    EXPECT_GT(std::filesystem::file_size(png), 1000u) << png;
  }
  EXPECT_FALSE(is_png(csv));
}

TEST(StudySweep, DeterministicAndOneRecordingPerPerRankStep) {
  // Devices with the same attention kernel and topologies share a recording; the same
  // recording replays to the same bits on 1 or 2 threads, and every point matches a fresh,
  // uncached titan-train simulation of its config (a new recording: the recorder's
  // dependency tracking may differ in the last digits between recordings).
  const Overrides a = {{"simulation.device", "tpu-v5p"}}, b = {{"simulation.device", "tpu-v4"}},
                  c = {{"simulation.device", "h100"}};
  const std::vector<Overrides> combos = {a, b, c, a, b, c};
  RecordingCache cache;
  const SweepRun r1 = run_sweep(tiny_config(), combos, cache, 1, "");
  const SweepRun r2 = run_sweep(tiny_config(), combos, cache, 2, "");
  EXPECT_EQ(cache.lookups(), 12);
  EXPECT_LE(cache.recordings(), 2);  // tpu and gpu may differ in fused attention, no more
  PriceTable prices;
  for (size_t i = 0; i < combos.size(); ++i) {
    EXPECT_EQ(point_json(r1.points[i], prices).dump(), point_json(r2.points[i], prices).dump());
    const SimulationResult fresh = simulate(r1.points[i].cfg, /*other_mode=*/false);
    const double t = r1.points[i].result.report.step_time_s;
    EXPECT_NEAR(fresh.report.step_time_s, t, 1e-6 * t) << i;
    EXPECT_DOUBLE_EQ(fresh.memory.total_gib(), r1.points[i].result.memory.total_gib()) << i;
  }
}

TEST(StudySweep, BadKeyOrValueIsAnInvalidPointNamingIt) {
  RecordingCache cache;
  const SweepRun run = run_sweep(tiny_config(), {{{"simulation.num_chipz", "8"}}, {{"comm.collective_mode", "x"}},
                                                 {{"parallelism.tensor_parallel_degree", "3"}}},
                                 cache, 1, "");
  for (const auto& p : run.points) EXPECT_EQ(p.verdict, Verdict::kInvalid);
  EXPECT_NE(run.points[0].reason.find("num_chipz"), std::string::npos) << run.points[0].reason;
  EXPECT_NE(run.points[1].reason.find("collective_mode"), std::string::npos) << run.points[1].reason;
  EXPECT_FALSE(run.points[2].reason.empty());
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
