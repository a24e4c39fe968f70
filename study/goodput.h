// Goodput, wall time, cost and energy of a whole run at a study point: the point's simulated
// step put through the run model (devices/run_model.h, devices/energy_model.h) with the
// config's [goodput] settings, the chip file's failure and power figures and the price file.
// Used by the results files, the best-layout table, the goodput table and plot of titan-study.
#pragma once

#include <string>
#include <vector>

#include "devices/energy_model.h"
#include "devices/run_model.h"
#include "study/evaluate.h"
#include "study/prices.h"

namespace titan::study {

struct RunFigures {
  bool ok = false;          // the point fits and its chip has failure figures
  std::string why;          // why not
  devices::RunEstimate run;
  double busy_share = 0;    // compute stream busy over the step: what the chip's power follows
  bool has_energy = false;  // the chip has [power] figures
  devices::RunEnergy energy;
  bool has_price = false;
  double usd = 0, usd_per_mtok = 0;  // job chips and spares, for the whole wall time
  // The figures of this estimate that no vendor publishes (power.tdp, reliability.chip_mtbf,
  // ...: their source starts with ASSUMED or ESTIMATE), comma-separated.
  std::string assumed;
};

RunFigures run_figures(const Point& p, const PriceTable& prices);

// "ASSUMED / ESTIMATED figures ..." lines, one per device, for the points' run columns.
std::vector<std::string> assumed_figure_lines(const std::vector<Point>& points, const PriceTable& prices);

// The goodput table titan-study prints for a sweep: per point its chips, step, MFU, goodput,
// wall hours, failures, checkpoint interval (s), cost and energy per million tokens.
std::string format_goodput_table(const std::vector<Point>& points, const std::vector<std::string>& keys,
                                 const PriceTable& prices);

// <folder>/<name>_goodput.png: goodput (%) against x_key (chip counts), one line per value of
// the other swept keys (plots.h); "" without an x key or a point to draw.
std::string draw_goodput_plot(const std::string& folder, const std::string& name, const std::string& x_key,
                              const std::vector<std::string>& keys, const std::vector<Point>& points,
                              const PriceTable& prices);

}  // namespace titan::study
