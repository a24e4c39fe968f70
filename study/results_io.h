// Study results as files: one CSV row and one JSON line per point (same columns), in the
// order the points were listed. Used by titan-study and the tests.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "study/evaluate.h"
#include "study/prices.h"

namespace titan::study {

// The columns every study writes, in order (the swept keys come first, then these).
const std::vector<std::string>& result_columns();
// Then every [goodput] setting as its config key ("goodput.pue"): what the run columns were
// worked out with, so that a report quotes them from the data (launch/goodput_report.py).
const std::vector<std::string>& run_setting_columns();

// One point as JSON: the swept keys (by their config names), result_columns() and
// run_setting_columns(). Price figures are null when the device has no price.
nlohmann::json point_json(const Point& p, const PriceTable& prices);

// Writes <folder>/<stem>.csv and <folder>/<stem>.jsonl; returns the CSV path. The JSON lines
// hold every figure as the shortest decimal that reads back to the same double.
std::string write_results(const std::string& folder, const std::vector<std::string>& swept_keys,
                          const std::vector<Point>& points, const PriceTable& prices,
                          const std::string& stem = "results");

// A CSV field: quoted when it holds a comma, quote or newline.
std::string csv_field(const std::string& s);

}  // namespace titan::study
