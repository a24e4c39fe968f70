// A custom pipeline schedule from a CSV file (pipeline_schedule.h).
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "parallel/pipeline_schedule.h"

namespace titan {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

PipeSchedule load_pipeline_schedule_csv(const std::string& path, int num_ranks, int num_microbatches) {
  std::ifstream in(path);
  TITAN_CONFIG_CHECK(in.good(), "parallelism.pipeline_parallel_schedule_csv: cannot read '", path, "'");
  PipeSchedule s;
  s.name = path;
  s.num_ranks = num_ranks;
  s.num_microbatches = num_microbatches;
  std::string line;
  int line_no = 0;
  std::vector<int> rank_line;
  while (std::getline(in, line)) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    if (trim(line).empty()) continue;
    const std::string at = path + ":" + std::to_string(line_no);
    TITAN_CONFIG_CHECK(static_cast<int>(s.ranks.size()) < num_ranks, at, ": more action lines than the ", num_ranks,
                       " pipeline ranks (one line per rank)");
    std::vector<PipeAction> list;
    std::stringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) {
      cell = trim(cell);
      if (!cell.empty()) list.push_back(parse_pipe_action(cell, at));
    }
    s.ranks.push_back(std::move(list));
    rank_line.push_back(line_no);
  }
  TITAN_CONFIG_CHECK(static_cast<int>(s.ranks.size()) == num_ranks, path, ": ", s.ranks.size(),
                     " action lines, but pipeline_parallel_degree is ", num_ranks, " (one line per rank)");
  // Stages and their ranks come from where the actions are.
  int stages = 0;
  for (const auto& list : s.ranks)
    for (const auto& a : list) stages = std::max(stages, a.stage + 1);
  s.num_stages = stages;
  s.stage_rank.assign(stages, -1);
  for (int r = 0; r < num_ranks; ++r) {
    for (const auto& a : s.ranks[r]) {
      int& owner = s.stage_rank[a.stage];
      TITAN_CONFIG_CHECK(owner < 0 || owner == r, path, ":", rank_line[r], ": stage ", a.stage, " appears on rank ",
                         owner, " and on rank ", r, " (", a.to_string(), "); a stage lives on one rank");
      owner = r;
    }
  }
  for (int g = 0; g < stages; ++g)
    TITAN_CONFIG_CHECK(s.stage_rank[g] >= 0, path, ": stage ", g, " has no actions");
  for (int r = 0; r < num_ranks; ++r)
    TITAN_CONFIG_CHECK(!s.stages_of(r).empty(), path, ":", rank_line[r], ": rank ", r, " holds no stage");
  if (!s.has_p2p()) {
    validate_pipeline_schedule(s, /*compute_only=*/true);
    insert_p2p(s);
  }
  validate_pipeline_schedule(s);
  return s;
}

}  // namespace titan
