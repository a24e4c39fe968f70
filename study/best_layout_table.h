// The best-layout table: a layout search per combination of a sweep file (e.g. every catalog
// chip x two models), each combination's best fitting layout with tokens/s per chip, MFU and
// cost per million tokens. The cross-vendor comparison of configs/studies/. Used by
// titan-study.
#pragma once

#include <string>
#include <vector>

#include "study/layout_search.h"
#include "study/prices.h"
#include "study/sweep_file.h"

namespace titan::study {

struct BestLayoutTable {
  std::vector<Overrides> combos;
  std::vector<std::string> swept;  // the sweep's axes: the keys whose values tell combinations apart
  // Per combination: its best point (overrides = the combination's, then the layout's), or
  // an invalid point whose reason lists why every family was rejected.
  std::vector<Point> best;
  std::vector<int64_t> searched;  // configurations simulated per combination
  RunStats stats;                 // over every search
  // With keep_candidates: every candidate of every combination, combination by combination in
  // enumeration order (overrides as for best), fitting or not.
  std::vector<Point> candidates;
};

BestLayoutTable best_layout_table(const JobConfig& base, const SweepFile& sweep, RecordingCache& cache,
                                  int threads, const SearchSpace& space = SearchSpace{},
                                  bool keep_candidates = false);

std::string format_best_layout_table(const BestLayoutTable& t, const PriceTable& prices);
// The same as a Markdown table with the price sources; returns the path.
std::string write_best_layout_markdown(const std::string& path, const BestLayoutTable& t, const PriceTable& prices);

}  // namespace titan::study
