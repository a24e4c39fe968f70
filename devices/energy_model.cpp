// Run energy (see energy_model.h).
#include "devices/energy_model.h"

#include <algorithm>

#include "common/error.h"

namespace titan::devices {

double chip_power_w(const ChipSpec& chip, double busy_share) {
  TITAN_CONFIG_CHECK(chip.tdp_w > 0, chip.file, ": chip '", chip.name,
                     "' has no power.tdp (needed for energy figures; devices/README.md)");
  const double u = std::clamp(busy_share, 0.0, 1.0);
  return chip.idle_w + (chip.tdp_w - chip.idle_w) * u;
}

RunEnergy run_energy(const RunEstimate& run, int64_t chips, double busy_share, const ChipSpec& chip,
                     const RunSettings& s) {
  RunEnergy e;
  constexpr double kJoulesPerKwh = 3.6e6;
  const double n = static_cast<double>(chips);
  const double busy_s = run.ideal_s + run.lost_s;
  const double waiting_s = run.wall_s - busy_s;
  const double job_chip_j = n * (chip_power_w(chip, busy_share) * busy_s + chip.idle_w * waiting_s);
  e.chip_kwh = (job_chip_j + run.spares * chip.idle_w * run.wall_s) / kJoulesPerKwh;
  e.host_kwh = (n + run.spares) * chip.host_w_per_chip * run.wall_s / kJoulesPerKwh;
  e.network_kwh = (n + run.spares) * chip.network_w_per_chip * run.wall_s / kJoulesPerKwh;
  e.facility_kwh = (e.chip_kwh + e.host_kwh + e.network_kwh) * s.pue;
  const double mtok = s.total_tokens / 1e6;
  e.kwh_per_mtok = e.facility_kwh / mtok;
  e.gco2_per_mtok = e.kwh_per_mtok * s.grid_gco2_per_kwh;
  e.tonnes_co2 = e.facility_kwh * s.grid_gco2_per_kwh / 1e6;
  e.mean_chip_w = run.wall_s > 0 ? job_chip_j / run.wall_s / n : 0;
  return e;
}

}  // namespace titan::devices
