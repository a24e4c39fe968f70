// PNG plots of a study, drawn by gnuplot (Debian's gnuplot-nox) from data and script files
// written next to the results, so a plot can be restyled and redrawn by hand:
//   <name>_mfu.png        MFU against the x key, one line per value of the other swept keys
//   <name>_goodput.png    goodput of the whole run (study/goodput.h) against the x key
//   <name>_breakdown.png  each fitting point's step split into compute, exposed collectives,
//                         pipeline bubble and idle, as a share of its step time (stacked)
// Used by titan-study and the tests.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "study/evaluate.h"

namespace titan::study {

// Where gnuplot is (TITAN_GNUPLOT, else `gnuplot` on PATH); empty when it is missing.
std::string find_gnuplot();

// Writes the data and script files and runs gnuplot; returns the PNG paths. x_key must be
// a swept key with numeric values for the line plot (log2 axis for chip counts); without
// one, only the breakdown is drawn. Throws a runtime error naming the script if gnuplot fails.
std::vector<std::string> draw_plots(const std::string& folder, const std::string& name, const std::string& x_key,
                                    const std::vector<std::string>& swept_keys, const std::vector<Point>& points);

// One line plot <folder>/<name>_<what>.png of value(point) against x_key, one line per value
// of the other swept keys (points without a value are left out); returns the PNG's path, or ""
// when there is no x key or nothing to draw. draw_plots' MFU plot; the goodput plot.
std::string draw_line_plot(const std::string& folder, const std::string& name, const std::string& what,
                           const std::string& title, const std::string& ylabel, const std::string& x_key,
                           const std::vector<std::string>& keys, const std::vector<Point>& points,
                           const std::function<std::optional<double>(const Point&)>& value);

// True when `path` starts with the 8-byte PNG signature.
bool is_png(const std::string& path);

}  // namespace titan::study
