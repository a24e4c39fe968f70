// The run model (see run_model.h).
#include "devices/run_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "common/error.h"

namespace titan::devices {

double young_interval_s(double checkpoint_s, double mtbf_s) {
  TITAN_CHECK(checkpoint_s >= 0 && mtbf_s > 0, "young_interval_s: checkpoint ", checkpoint_s, " s, MTBF ", mtbf_s, " s");
  return std::sqrt(2 * checkpoint_s * mtbf_s);
}

double daly_interval_s(double checkpoint_s, double mtbf_s) {
  TITAN_CHECK(checkpoint_s >= 0 && mtbf_s > 0, "daly_interval_s: checkpoint ", checkpoint_s, " s, MTBF ", mtbf_s, " s");
  if (checkpoint_s >= 2 * mtbf_s) return mtbf_s;
  const double x = checkpoint_s / (2 * mtbf_s);
  return std::sqrt(2 * checkpoint_s * mtbf_s) * (1 + std::sqrt(x) / 3 + x / 9) - checkpoint_s;
}

double expected_wall_s(double work_s, double interval_s, double checkpoint_s, double restart_s, double mtbf_s) {
  TITAN_CHECK(interval_s > 0, "expected_wall_s: interval must be positive, got ", interval_s);
  const double segments = work_s / interval_s;
  if (mtbf_s <= 0) return segments * (interval_s + checkpoint_s);
  // expm1 keeps the digits when the segment is a small part of the MTBF (the usual case).
  return mtbf_s * std::exp(restart_s / mtbf_s) * std::expm1((interval_s + checkpoint_s) / mtbf_s) * segments;
}

double expected_lost_work_s(double interval_s, double checkpoint_s, double mtbf_s, double durable_lag_s) {
  const double t = interval_s + checkpoint_s;
  if (mtbf_s <= 0) return t / 2 + durable_lag_s;
  const double r = t / mtbf_s;
  // M - T / (e^r - 1) loses every digit for tiny r; its series there is T/2 - T r / 12.
  const double in_segment = r < 1e-6 ? t / 2 - t * r / 12 : mtbf_s - t / std::expm1(r);
  return in_segment + durable_lag_s;
}

namespace {

// Upper tail of the standard normal, P(Z > z).
double upper_tail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

double integrate_max_step_factor(int64_t n, double sigma, double slow_fraction, double slowdown) {
  const double p = slowdown > 0 ? slow_fraction : 0;
  const double nd = static_cast<double>(n);
  if (sigma == 0) return 1 + slowdown * (1 - std::pow(1 - p, nd));  // no jitter: two values
  // E[max] = lo + integral from lo to hi of (1 - G(x)) dx, G = F^n the CDF of the maximum,
  // with G(lo) ~ 0 and G(hi) ~ 1 (12 sigma around both values). Simpson's rule, F^n as
  // exp(n log1p(-tail)): 1 - F is the small number near the top, where G turns.
  const double lo = 1 - 12 * sigma, hi = 1 + slowdown + 12 * sigma;
  const int steps = 8000;
  const double h = (hi - lo) / steps;
  auto one_minus_g = [&](double x) {
    const double tail = (1 - p) * upper_tail((x - 1) / sigma) + p * upper_tail((x - 1 - slowdown) / sigma);
    if (tail >= 1) return 1.0;
    return -std::expm1(nd * std::log1p(-tail));
  };
  double sum = one_minus_g(lo) + one_minus_g(hi);
  for (int i = 1; i < steps; ++i) sum += (i % 2 ? 4 : 2) * one_minus_g(lo + i * h);
  return lo + sum * h / 3;
}

// Each value is an 8,000-point integral (3 million instructions), and a study asks for the same
// few chip counts once per result row (7% of a study process's instructions before this): the
// results are kept, keyed by the exact arguments, so a value read back is the one computed.
class MaxStepFactors {
 public:
  double get(int64_t n, double sigma, double slow_fraction, double slowdown) {
    const Key k{n, sigma, slow_fraction, slowdown};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = values_.find(k); it != values_.end()) return it->second;
    }
    const double v = integrate_max_step_factor(n, sigma, slow_fraction, slowdown);
    std::lock_guard<std::mutex> lock(mu_);
    if (values_.size() >= 4096) values_.clear();  // a bound for long-lived callers
    values_.emplace(k, v);
    return v;
  }

 private:
  using Key = std::tuple<int64_t, double, double, double>;
  std::mutex mu_;
  std::map<Key, double> values_;
};

}  // namespace

double expected_max_step_factor(int64_t n, double sigma, double slow_fraction, double slowdown) {
  static MaxStepFactors values;
  TITAN_CHECK(n >= 1 && sigma >= 0 && slow_fraction >= 0 && slow_fraction <= 1 && slowdown >= 0,
              "expected_max_step_factor: n ", n, ", sigma ", sigma, ", slow fraction ", slow_fraction, ", slowdown ",
              slowdown);
  return values.get(n, sigma, slow_fraction, slowdown);
}

double spare_free_probability(double spares, double mean_out) {
  const double units = std::floor(spares);
  if (units < 1) return 0;
  if (mean_out <= 0) return 1;
  double sum = 0;
  for (double k = 0; k < units; ++k) sum += std::exp(-mean_out + k * std::log(mean_out) - std::lgamma(k + 1));
  return std::min(sum, 1.0);
}

RunEstimate estimate_run(const RunStep& step, const ChipSpec& chip, const RunSettings& s) {
  TITAN_CHECK(step.chips > 0 && step.step_time_s > 0 && step.tokens_per_step > 0, "estimate_run: chips ", step.chips,
              ", step ", step.step_time_s, " s, ", step.tokens_per_step, " tokens per step");
  TITAN_CHECK(step.replicas >= 1 && step.chips % step.replicas == 0, "estimate_run: ", step.chips,
              " chips are not a whole number of ", step.replicas, " replicas");
  RunEstimate e;
  const double n = static_cast<double>(step.chips);
  e.steps = s.total_tokens / step.tokens_per_step;
  e.ideal_s = e.steps * step.step_time_s;
  e.straggler_factor = expected_max_step_factor(step.chips, s.straggler_sigma, s.slow_chip_fraction, s.slow_chip_slowdown);
  e.straggler_s = e.ideal_s * (e.straggler_factor - 1);
  const double work_s = e.ideal_s + e.straggler_s;

  // Failure rates per chip, per second; the job fails when any of its chips does.
  auto rate = [](double mtbf) { return mtbf > 0 ? 1 / mtbf : 0.0; };
  const double hw_rate = rate(chip.chip_mtbf_s) + rate(chip.host_mtbf_s) + rate(chip.link_mtbf_s);
  const double per_chip = hw_rate + rate(chip.software_mtbf_s);
  e.job_mtbf_s = per_chip > 0 ? 1 / (n * per_chip) : 0;
  e.hardware_share = per_chip > 0 ? hw_rate / per_chip : 0;

  // Checkpoints: each chip of one replica writes its own shards (titan's per-rank files; the
  // other dp_replicate replicas hold copies and write nothing) at its share of the storage
  // bandwidth, at most its own scale-out link; on a restart every chip reads its shards back,
  // all of them sharing the bandwidth. Async copies to host memory first (only that blocks)
  // and writes behind, the next save waiting for the previous write.
  auto storage_s = [&](double sharing) {
    double bw = s.storage_bytes_per_s / sharing;
    if (chip.scale_out_bytes_per_s > 0) bw = std::min(bw, chip.scale_out_bytes_per_s);
    return step.checkpoint_bytes_per_chip / bw;
  };
  e.checkpoint_write_s = storage_s(n / static_cast<double>(step.replicas));
  e.checkpoint_load_s = storage_s(n);
  const bool async = step.async_checkpoint && chip.host_link_bytes_per_s > 0;
  const double copy_s = async ? step.checkpoint_bytes_per_chip / chip.host_link_bytes_per_s : e.checkpoint_write_s;
  e.durable_lag_s = async ? e.checkpoint_write_s : 0;
  const double step_s = step.step_time_s * e.straggler_factor;
  if (s.checkpoint_interval_s > 0) {
    e.interval_s = s.checkpoint_interval_s;
  } else if (e.job_mtbf_s > 0) {
    e.interval_s = daly_interval_s(copy_s, e.job_mtbf_s);
    if (async) e.interval_s = std::max(e.interval_s, e.checkpoint_write_s);  // no save waits for the last
  }
  if (e.job_mtbf_s > 0) e.young_interval_s = young_interval_s(copy_s, e.job_mtbf_s);
  // Saves happen between steps: no more often than every step; none without failures unless asked.
  if (e.interval_s > 0) e.interval_s = std::max(e.interval_s, step_s);
  e.checkpoint_block_s = copy_s + (async ? std::max(0.0, e.checkpoint_write_s - e.interval_s) : 0);
  if (e.interval_s <= 0) {  // no failures and no interval asked: no saves
    e.interval_s = work_s;
    e.checkpoint_block_s = 0;
  }

  // Spares: hardware failures take a node out for repair_h; a failure finds a spare free
  // while fewer nodes than spares are out. Software failures restart in place.
  e.spares = std::floor(s.spare_fraction * n);
  const double node_chips = std::max<double>(1, static_cast<double>(chip.replace_chips));
  const double spare_nodes = std::floor(e.spares / node_chips);
  const double nodes_out = n * hw_rate * s.repair_h * 3600;
  e.spare_free = spare_free_probability(spare_nodes, nodes_out);
  const double hw_restart = e.spare_free * s.spare_restart_s + (1 - e.spare_free) * s.restart_s;
  e.restart_per_failure_s = s.detect_s + e.hardware_share * hw_restart + (1 - e.hardware_share) * s.spare_restart_s +
                            e.checkpoint_load_s;
  e.lost_per_failure_s = expected_lost_work_s(e.interval_s, e.checkpoint_block_s, e.job_mtbf_s, e.durable_lag_s);

  // Daly's wall time with the async lag as part of each failure's cost; the overhead beyond
  // the work and its saves is split between restarts and lost work as their per-failure means.
  e.wall_s = expected_wall_s(work_s, e.interval_s, e.checkpoint_block_s, e.restart_per_failure_s + e.durable_lag_s,
                             e.job_mtbf_s);
  e.checkpoint_s = work_s / e.interval_s * e.checkpoint_block_s;
  e.finishes = std::isfinite(e.wall_s) && e.wall_s < std::numeric_limits<double>::max();
  if (!e.finishes) {
    e.wall_s = std::numeric_limits<double>::infinity();
    e.goodput = 0;
    return e;
  }
  const double overhead = std::max(0.0, e.wall_s - work_s - e.checkpoint_s);
  const double per_failure = e.restart_per_failure_s + e.lost_per_failure_s;
  e.restart_s = per_failure > 0 ? overhead * e.restart_per_failure_s / per_failure : 0;
  e.lost_s = overhead - e.restart_s;
  e.failures = e.job_mtbf_s > 0 ? e.wall_s / e.job_mtbf_s : 0;
  e.goodput = e.ideal_s / e.wall_s;
  return e;
}

}  // namespace titan::devices
