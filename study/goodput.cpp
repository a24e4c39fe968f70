// Whole-run figures of a study point (see goodput.h).
#include "study/goodput.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "study/plots.h"
#include "trainer/simulate/simulate.h"

namespace titan::study {

namespace {

bool unpublished(const std::string& source) {
  return source.rfind("ASSUMED", 0) == 0 || source.rfind("ESTIMATE", 0) == 0 || source.rfind("estimate", 0) == 0;
}

}  // namespace

RunFigures run_figures(const Point& p, const PriceTable& prices) {
  RunFigures f;
  if (p.verdict != Verdict::kOk) {
    f.why = "no fitting step";
    return f;
  }
  const SimulationResult& r = p.result;
  const devices::ChipSpec chip = simulated_chip(p.cfg);
  devices::RunStep step;
  step.chips = r.num_chips;
  step.step_time_s = r.report.step_time_s;
  step.tokens_per_step = static_cast<double>(r.global_batch) * static_cast<double>(r.seq_len);
  // What titan's checkpointer saves per rank: its parameter shards and their optimizer state.
  step.checkpoint_bytes_per_chip = static_cast<double>(r.memory.params + r.memory.optimizer);
  step.async_checkpoint = p.cfg.checkpoint.async_mode != AsyncMode::kDisabled;
  step.replicas = std::max<int64_t>(1, r.dims.dp_replicate);  // only the first replica writes
  if (step.step_time_s <= 0 || step.tokens_per_step <= 0) {
    f.why = "no step time";
    return f;
  }
  f.run = devices::estimate_run(step, chip, p.cfg.goodput);
  f.ok = true;
  f.busy_share = r.report.compute_s / r.report.step_time_s;
  if (chip.tdp_w > 0 && f.run.finishes) {
    f.has_energy = true;
    f.energy = devices::run_energy(f.run, step.chips, f.busy_share, chip, p.cfg.goodput);
  }
  if (const auto price = prices.find(chip.name); price && f.run.finishes) {
    f.has_price = true;
    f.usd = (static_cast<double>(step.chips) + f.run.spares) * price->usd_per_chip_hour * f.run.wall_s / 3600;
    f.usd_per_mtok = f.usd / (p.cfg.goodput.total_tokens / 1e6);
  }
  for (const char* key : {"reliability.chip_mtbf", "reliability.host_mtbf", "reliability.link_mtbf",
                          "reliability.software_mtbf", "power.tdp", "power.idle", "power.host_per_chip",
                          "power.network_per_chip", "host.link_bytes_per_s"}) {
    auto it = chip.sources.find(key);
    if (it != chip.sources.end() && unpublished(it->second)) f.assumed += (f.assumed.empty() ? "" : ",") + std::string(key);
  }
  return f;
}

std::string format_goodput_table(const std::vector<Point>& points, const std::vector<std::string>& keys,
                                 const PriceTable& prices) {
  // One label per point, the swept values other than the chip count, never cut short: cut to a
  // fixed width, points that differ only in a late value (goodput.spare_fraction) shared one.
  std::vector<std::string> labels;
  size_t width = 23;
  for (const Point& p : points) {
    std::string label;
    for (const auto& k : keys)
      if (k != "simulation.num_chips") label += (label.empty() ? "" : " ") + key_value(p.cfg, k);
    if (label.empty()) label = p.cfg.simulation.device;
    width = std::max(width, label.size());
    labels.push_back(label);
  }
  const int w = static_cast<int>(width) + 1;
  std::ostringstream os;
  os << std::left << std::setw(w) << "point" << std::right << std::setw(8) << "chips" << std::setw(9) << "step s"
     << std::setw(7) << "MFU %" << std::setw(10) << "goodput %" << std::setw(10) << "wall h" << std::setw(10)
     << "failures" << std::setw(10) << "ckpt s" << std::setw(9) << "$/Mtok" << std::setw(10) << "kWh/Mtok"
     << std::setw(11) << "gCO2/Mtok" << "\n";
  for (size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    os << std::left << std::setw(w) << labels[i] << std::right << std::setw(8) << p.cfg.simulation.num_chips;
    const RunFigures f = run_figures(p, prices);
    if (!f.ok) {
      os << "  " << (p.verdict == Verdict::kOk ? f.why : std::string(verdict_name(p.verdict)) + ": " + p.reason.substr(0, 80))
         << "\n";
      continue;
    }
    const auto& e = f.run;
    os << std::fixed << std::setprecision(3) << std::setw(9) << p.result.report.step_time_s << std::setprecision(1)
       << std::setw(7) << p.result.mfu_percent << std::setw(10) << 100 * e.goodput << std::setprecision(2)
       << std::setw(10) << e.wall_s / 3600 << std::setprecision(1) << std::setw(10) << e.failures
       << std::setprecision(1) << std::setw(10) << e.interval_s;
    os << std::setprecision(3) << std::setw(9);
    if (f.has_price) os << f.usd_per_mtok; else os << "-";
    os << std::setw(10);
    if (f.has_energy) os << f.energy.kwh_per_mtok; else os << "-";
    os << std::setprecision(1) << std::setw(11);
    if (f.has_energy) os << f.energy.gco2_per_mtok; else os << "-";
    os << "\n";
  }
  os << std::defaultfloat << "goodput: useful share of the expected wall time of "
     << (points.empty() ? 0 : points[0].cfg.goodput.total_tokens)
     << " tokens (failures, restarts, lost work, checkpoints, stragglers: docs/goodput.md); ckpt s: seconds "
        "between checkpoints\n";
  for (const auto& a : assumed_figure_lines(points, prices)) os << a << "\n";
  return os.str();
}

std::vector<std::string> assumed_figure_lines(const std::vector<Point>& points, const PriceTable& prices) {
  std::vector<std::string> lines;
  for (const Point& p : points) {
    const RunFigures f = run_figures(p, prices);
    if (!f.ok || f.assumed.empty()) continue;
    const std::string a = "ASSUMED / ESTIMATED figures (no public source) in " + p.cfg.simulation.device + ": " + f.assumed;
    if (std::find(lines.begin(), lines.end(), a) == lines.end()) lines.push_back(a);
  }
  return lines;
}

std::string draw_goodput_plot(const std::string& folder, const std::string& name, const std::string& x_key,
                              const std::vector<std::string>& keys, const std::vector<Point>& points,
                              const PriceTable& prices) {
  return draw_line_plot(folder, name, "goodput", "goodput of the whole run (simulated step, run model)",
                        "goodput (% of wall time)", x_key, keys, points, [&](const Point& p) -> std::optional<double> {
                          const RunFigures f = run_figures(p, prices);
                          if (!f.ok) return std::nullopt;
                          return 100 * f.run.goodput;
                        });
}

}  // namespace titan::study
