// Tests for run energy (devices/energy_model.h) against hand-computed watts and kWh.
#include "devices/energy_model.h"

#include <gtest/gtest.h>

#include "devices/chip_file.h"
#include "tests/error_of.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

ChipSpec chip_700w() {
  ChipSpec c;
  c.name = "test";
  c.tdp_w = 700, c.idle_w = 70, c.host_w_per_chip = 500, c.network_w_per_chip = 100;
  return c;
}

TEST(EnergyModel, ChipPowerAtUtilisation) {
  // 70 + (700 - 70) * 0.6 = 70 + 378 = 448 W; idle and full at the ends, clamped outside.
  EXPECT_DOUBLE_EQ(chip_power_w(chip_700w(), 0.6), 448);
  EXPECT_DOUBLE_EQ(chip_power_w(chip_700w(), 0), 70);
  EXPECT_DOUBLE_EQ(chip_power_w(chip_700w(), 1), 700);
  EXPECT_DOUBLE_EQ(chip_power_w(chip_700w(), 1.5), 700);
  ChipSpec none = chip_700w();
  none.tdp_w = 0;
  EXPECT_NE(error_of([&] { chip_power_w(none, 0.5); }, ErrorKind::kConfig).find("power.tdp"), std::string::npos);
}

TEST(EnergyModel, RunEnergyByHand) {
  RunEstimate run;
  run.ideal_s = 3000, run.lost_s = 600, run.wall_s = 4000, run.spares = 10;  // 400 s waiting
  RunSettings s;
  s.pue = 1.2, s.grid_gco2_per_kwh = 400, s.total_tokens = 1e9;
  const RunEnergy e = run_energy(run, 1000, 0.6, chip_700w(), s);
  // Chips: 1000 x (448 W x 3600 s + 70 W x 400 s) = 1000 x (1,612,800 + 28,000) J = 1.6408e9 J
  // spares: 10 x 70 W x 4000 s = 2.8e6 J; (1.6408e9 + 2.8e6) / 3.6e6 = 456.556 kWh.
  EXPECT_NEAR(e.chip_kwh, 456.556, 1e-3);
  // Host 1010 x 500 W x 4000 s / 3.6e6 = 561.111 kWh; network 1010 x 100 x 4000 / 3.6e6 = 112.222.
  EXPECT_NEAR(e.host_kwh, 561.111, 1e-3);
  EXPECT_NEAR(e.network_kwh, 112.222, 1e-3);
  // (456.556 + 561.111 + 112.222) x 1.2 = 1355.867 kWh over 1000 Mtok; x 400 g = 542.35 g/Mtok.
  EXPECT_NEAR(e.facility_kwh, 1355.867, 1e-2);
  EXPECT_NEAR(e.kwh_per_mtok, 1.355867, 1e-5);
  EXPECT_NEAR(e.gco2_per_mtok, 542.35, 1e-2);
  EXPECT_NEAR(e.tonnes_co2, 0.54235, 1e-5);
  // Mean chip draw: 1.6408e9 J / 4000 s / 1000 chips = 410.2 W.
  EXPECT_NEAR(e.mean_chip_w, 410.2, 1e-9);
}

TEST(EnergyModel, CatalogPowerFiguresHaveSources) {
  for (const char* name : {"a100", "h100", "h200", "b200", "tpu-v4", "tpu-v7", "trn2"}) {
    const ChipSpec& c = catalog_chip(name);
    EXPECT_GT(c.tdp_w, c.idle_w) << name;
    EXPECT_GT(c.idle_w, 0) << name;
    EXPECT_GT(c.host_w_per_chip, 0) << name;
    EXPECT_GT(c.network_w_per_chip, 0) << name;
    EXPECT_FALSE(c.sources.at("power.tdp").empty()) << name;
    EXPECT_GT(c.chip_mtbf_s, 0) << name;
    EXPECT_FALSE(c.sources.at("reliability.chip_mtbf").empty()) << name;
  }
  // The figures no vendor publishes say so.
  EXPECT_EQ(catalog_chip("tpu-v7").sources.at("power.tdp").rfind("ASSUMED", 0), 0u);
  EXPECT_EQ(catalog_chip("trn2").sources.at("reliability.chip_mtbf").rfind("ASSUMED", 0), 0u);
  EXPECT_EQ(catalog_chip("h100").sources.at("reliability.chip_mtbf").rfind("Llama 3", 0), 0u);
  // 1 h = 3600 s: 79,230 h per H100.
  EXPECT_DOUBLE_EQ(catalog_chip("h100").chip_mtbf_s, 79230.0 * 3600);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
