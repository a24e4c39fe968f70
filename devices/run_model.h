// The run model: what a whole training run of N tokens takes in wall time on top of its
// simulated step, once failures, detection and restart, checkpoint saves, lost work and
// stragglers are counted, and the share of that time that trains (goodput). Closed forms
// (Young 1974, Daly 2006, the expected maximum of N draws), so a 65,536-chip point costs
// microseconds. Used by titan-study (study/goodput.h); the model and its figures: docs/goodput.md.
#pragma once

#include <cstdint>

#include "common/run_settings.h"
#include "devices/chip_catalog.h"

namespace titan::devices {

// Young's first-order optimum of the compute time between checkpoints: sqrt(2 delta M) for a
// checkpoint that blocks for delta seconds and a mean time between failures M.
double young_interval_s(double checkpoint_s, double mtbf_s);
// Daly's higher-order optimum for exponential failures: sqrt(2 delta M) (1 + sqrt(delta /
// (2M)) / 3 + delta / (18 M)) - delta while delta < 2M, else M.
double daly_interval_s(double checkpoint_s, double mtbf_s);
// Daly's expected wall time of work_s seconds of computation saved every interval_s of it
// (each save blocking checkpoint_s), failures arriving at mean mtbf_s (during restarts too),
// each costing restart_s before work resumes from the last save:
// M e^(R/M) (e^((tau + delta)/M) - 1) work / tau. mtbf_s <= 0: no failures.
double expected_wall_s(double work_s, double interval_s, double checkpoint_s, double restart_s, double mtbf_s);
// Expected work lost to one failure: the time since the segment (interval + save) began,
// for a failure that falls inside it: M - T / (e^(T/M) - 1), T = interval + save (T/2 as M
// grows), plus the lag until an async save is durable (a failure in it loses that save too).
double expected_lost_work_s(double interval_s, double checkpoint_s, double mtbf_s, double durable_lag_s = 0);
// Stragglers: a synchronous step waits for the slowest of n chips. Each chip's step takes
// 1 + sigma Z + slowdown B times the simulated step (Z standard normal: per-step jitter; B = 1
// for the slow_fraction of chips that are persistently slow). Returns E[max over n chips],
// integrated numerically over the distribution of the maximum.
double expected_max_step_factor(int64_t n, double sigma, double slow_fraction, double slowdown);
// P(X < spares) for X ~ Poisson(mean_out): a failed node finds a spare free when fewer nodes
// than there are spares are still out for repair.
double spare_free_probability(double spares, double mean_out);

// The simulated step a run repeats.
struct RunStep {
  int64_t chips = 0;
  double step_time_s = 0;
  double tokens_per_step = 0;
  double checkpoint_bytes_per_chip = 0;  // parameters and optimizer state the chip stores
  bool async_checkpoint = false;         // only the copy to host blocks; the write runs behind
  // dp_replicate: the replicas hold the same shards and only the first writes them (titan's
  // writes_tensors), so chips / replicas share the storage bandwidth on a save; on a restart
  // every chip reads its shards back.
  int64_t replicas = 1;
};

struct RunEstimate {
  double steps = 0;                // optimizer steps of the whole run
  double job_mtbf_s = 0;           // of every chip of the job together (0: no failure rate)
  double hardware_share = 0;       // of failures that take a node out (chip, host, link)
  double straggler_factor = 1;     // expected step / simulated step
  double checkpoint_block_s = 0;   // a save's time on the critical path
  double checkpoint_write_s = 0;   // writing a chip's shard to storage (one replica writes)
  double checkpoint_load_s = 0;    // reading it back on restart (every chip reads)
  double durable_lag_s = 0;        // async: from the snapshot until the save is durable
  double young_interval_s = 0, interval_s = 0;  // compute between saves (Young; the one used)
  double spares = 0;               // hot spare chips (paid, idle)
  double spare_free = 0;           // probability that a hardware failure finds a spare
  double restart_per_failure_s = 0;  // detection + restart or swap + checkpoint load
  double lost_per_failure_s = 0;
  double failures = 0;             // expected over the run
  // Wall time and its parts (they add up): the simulated steps, straggler waits, blocking
  // saves, restarts and recomputed (lost) work.
  double ideal_s = 0, straggler_s = 0, checkpoint_s = 0, restart_s = 0, lost_s = 0, wall_s = 0;
  double goodput = 0;  // ideal_s / wall_s
  bool finishes = true;  // false: failures come faster than the run can restart and save
};

// The run of settings.total_tokens over `step`'s chips of `chip`. Every failure rate is the
// chip file's ([reliability]); software failures restart in place, hardware ones swap in a
// spare when one is free (settings.spare_fraction, repair_h), else wait restart_s.
RunEstimate estimate_run(const RunStep& step, const ChipSpec& chip, const RunSettings& settings);

}  // namespace titan::devices
