// Energy of a whole run (devices/run_model.h): chip power at the simulated busy share,
// interpolated between the chip's idle draw and its TDP, plus its host and network share,
// times the data centre's PUE; kWh and gCO2 per million tokens. Used by titan-study
// (study/goodput.h); figures and the choice of busy share over MFU: docs/goodput.md.
#pragma once

#include "common/run_settings.h"
#include "devices/chip_catalog.h"
#include "devices/run_model.h"

namespace titan::devices {

// One chip's draw at busy share u in [0, 1]: idle + (tdp - idle) u. Busy share, not MFU: a
// chip running kernels draws near its TDP whatever share of them counts as model FLOPs
// (recompute, memory-bound kernels and comm-overlapped math all draw power).
double chip_power_w(const ChipSpec& chip, double busy_share);

struct RunEnergy {
  double chip_kwh = 0, host_kwh = 0, network_kwh = 0;  // IT energy of the job and its spares
  double facility_kwh = 0;                             // all of it times the PUE
  double kwh_per_mtok = 0, gco2_per_mtok = 0, tonnes_co2 = 0;
  double mean_chip_w = 0;  // over the wall time, job chips only
};

// Job chips draw chip_power_w(busy_share) while they train (the steps and the work redone
// after failures) and their idle draw while they wait (stragglers, blocking saves, restarts);
// spares idle throughout; host and network power runs for every chip the whole wall time.
// Needs the chip's [power] figures (config error naming its file if tdp is missing).
RunEnergy run_energy(const RunEstimate& run, int64_t chips, double busy_share, const ChipSpec& chip,
                     const RunSettings& settings);

}  // namespace titan::devices
