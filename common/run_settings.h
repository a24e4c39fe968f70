// RunSettings: the site's and the job's side of the run model (devices/run_model.h,
// devices/energy_model.h): how long a whole run of total_tokens takes, what it costs and what
// it draws once failures, restarts, checkpoints and stragglers are counted. The chip's side
// (failure rates, power) is in its data file ([reliability], [power]). The config's
// [goodput] section (trainer/config/job_config.h); defaults and their sources: docs/goodput.md.
#pragma once

namespace titan {

struct RunSettings {
  double total_tokens = 1e12;         // tokens the whole run trains on
  double checkpoint_interval_s = 0;   // compute seconds between saves; 0: Young/Daly optimum
  double storage_bytes_per_s = 2e12;  // checkpoint storage, whole cluster (Llama 3's Tectonic: 2 TB/s)
  double detect_s = 100;              // failure to detection (titan's default collective timeout)
  double restart_s = 600;             // replace a failed node with no spare free, restart, re-init
  double spare_restart_s = 120;       // swap in a hot spare (or restart in place), re-init
  double spare_fraction = 0;          // hot spare chips, as a share of the job's chips
  double repair_h = 24;               // hours a failed node stays out of the pool
  double straggler_sigma = 0.01;      // per-chip step-time jitter (standard deviation, share of the step)
  double slow_chip_fraction = 0;      // share of chips that are persistently slow
  double slow_chip_slowdown = 0;      // how much slower they are (0.1: 10%)
  double pue = 1.1;                   // data-centre power usage effectiveness
  double grid_gco2_per_kwh = 370;     // grid carbon intensity
};

}  // namespace titan
