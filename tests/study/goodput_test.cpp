// titan-study's run columns (study/goodput.h): a simulated point's goodput, cost and energy
// land in the result files and the goodput table, assumed figures are named, spares cost
// money, and bad [goodput] values and price kinds are errors naming the key or file.
#include "study/goodput.h"

#include <gtest/gtest.h>

#include <fstream>

#include "study/best_layout_table.h"
#include "study/results_io.h"
#include "study/sweep_runner.h"
#include "study_fixture.h"
#include "tests/error_of.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

using testing::tiny_config;

Point simulated(const std::string& device, std::vector<std::string> extra = {}) {
  extra.insert(extra.end(), {"--simulation.device", device, "--simulation.num_chips", "8"});
  RecordingCache cache;
  return evaluate(tiny_config(extra), {}, cache);
}

TEST(Goodput, RunColumnsOfASimulatedPoint) {
  const PriceTable prices = read_prices(default_prices_path());
  const Point p = simulated("b200");
  ASSERT_EQ(p.verdict, Verdict::kOk) << p.reason;
  const RunFigures f = run_figures(p, prices);
  ASSERT_TRUE(f.ok && f.run.finishes && f.has_energy && f.has_price);
  EXPECT_GT(f.run.goodput, 0.5);
  EXPECT_LT(f.run.goodput, 1.0);
  EXPECT_GT(f.busy_share, 0);
  EXPECT_LE(f.busy_share, 1);
  // 1e12 tokens over tokens/s per chip x 8 chips is the ideal time; the wall is longer.
  const double ideal = 1e12 / (p.result.tokens_per_s_per_chip * 8);
  EXPECT_NEAR(f.run.ideal_s / ideal, 1.0, 1e-9);
  EXPECT_GT(f.run.wall_s, ideal);
  // Run cost at least the step-only cost; B200 takes the H100s' Llama 3 rates (an assumption, named)
  // and an estimated idle power; the H100 itself has the measured rates.
  EXPECT_GE(f.usd_per_mtok, usd_per_million_tokens(*prices.find("b200"), p.result.tokens_per_s_per_chip));
  EXPECT_NE(f.assumed.find("reliability.chip_mtbf"), std::string::npos) << f.assumed;
  EXPECT_NE(f.assumed.find("power.idle"), std::string::npos) << f.assumed;
  EXPECT_EQ(run_figures(simulated("h100"), prices).assumed.find("reliability"), std::string::npos);
  const nlohmann::json j = point_json(p, prices);
  EXPECT_NEAR(j["goodput"].get<double>(), f.run.goodput, 1e-12);
  EXPECT_GT(j["kwh_per_million_tokens"].get<double>(), 0);
  // The [goodput] settings travel with the figures (reports quote them from there).
  EXPECT_EQ(j["goodput.pue"], "1.1");
  EXPECT_EQ(j["goodput.total_tokens"], "1e+12");
  EXPECT_EQ(j["goodput.restart_s"], "600");

  // Spares: paid for the whole run, so they cost more on a run this small (8 chips).
  const Point spared = simulated("b200", {"--goodput.spare_fraction", "1"});
  const RunFigures fs = run_figures(spared, prices);
  EXPECT_EQ(fs.run.spares, 8);
  EXPECT_GT(fs.usd, f.usd);

  // TPU v7: every failure rate and power figure is assumed, and the table says so.
  const Point tpu = simulated("tpu-v7");
  const std::string table = format_goodput_table({tpu}, {"simulation.device"}, prices);
  EXPECT_NE(table.find("ASSUMED / ESTIMATED figures (no public source) in tpu-v7: reliability.chip_mtbf"),
            std::string::npos)
      << table;
  // A chip with no power figures: no energy, still goodput.
  const RunFigures v5p = run_figures(simulated("tpu-v5p"), prices);
  EXPECT_TRUE(v5p.ok);
  EXPECT_FALSE(v5p.has_energy);
}

// Rows of the best-layout table that differ only in a swept value no other column shows
// (goodput.spare_fraction) are labelled with it; the goodput table does not cut labels short.
TEST(Goodput, RowsThatDifferOnlyInSparesHaveDistinctLabels) {
  const PriceTable prices = read_prices(default_prices_path());
  BestLayoutTable t;
  t.swept = {"simulation.device", "goodput.spare_fraction"};
  for (const char* spares : {"0", "0.02"}) {
    t.combos.push_back({{"goodput.total_tokens", "1e12"}, {"simulation.device", "b200"}, {"goodput.spare_fraction", spares}});
    t.best.push_back(simulated("b200", {"--goodput.spare_fraction", spares}));
    t.searched.push_back(1);
  }
  const std::string path = write_best_layout_markdown("/tmp/titan_goodput_test_labels/table.md", t, prices);
  std::ifstream f(path);
  std::vector<std::string> rows;
  for (std::string line; std::getline(f, line);)
    if (line.rfind("| b200 |", 0) == 0) rows.push_back(line.substr(0, line.find(" | ", line.find("chips"))));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NE(rows[0], rows[1]);
  // Only the swept value: the fixed total_tokens is the same in every row.
  EXPECT_NE(rows[1].find("| 8 chips, goodput.spare_fraction 0.02: "), std::string::npos) << rows[1];
  const std::string console = format_best_layout_table(t, prices);
  EXPECT_NE(console.find("8 chips, goodput.spare_fraction 0: "), std::string::npos) << console;

  std::vector<Point> points = t.best;
  points[0].cfg.job.description = points[1].cfg.job.description = std::string(30, 'x');
  const std::string table = format_goodput_table(points, {"job.description", "goodput.spare_fraction"}, prices);
  EXPECT_NE(table.find(std::string(30, 'x') + " 0.02"), std::string::npos) << table;
}

TEST(Goodput, BadSettingsAndPriceKindsAreErrors) {
  EXPECT_NE(error_of([] { tiny_config({"--goodput.pue", "0.5"}); }, ErrorKind::kConfig).find("goodput.pue"),
            std::string::npos);
  EXPECT_NE(error_of([] { tiny_config({"--goodput.spare_fraction", "2"}); }, ErrorKind::kConfig)
                .find("goodput.spare_fraction"),
            std::string::npos);
  const std::string path = "/tmp/titan_goodput_test_prices.toml";
  std::ofstream(path) << "[b200]\nusd_per_chip_hour = 10\nsource = \"test\"\n";
  EXPECT_NE(error_of([&] { read_prices(path); }, ErrorKind::kConfig).find("[b200].kind must be"), std::string::npos);
  std::ofstream(path) << "[b200]\nusd_per_chip_hour = 10\nkind = \"spot\"\nsource = \"test\"\n";
  EXPECT_NE(error_of([&] { read_prices(path); }, ErrorKind::kConfig).find("got \"spot\""), std::string::npos);
  for (const auto& [dev, price] : read_prices(default_prices_path()).by_device)
    EXPECT_TRUE(price.kind == "list" || price.kind == "assumed") << dev;
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
