// Exposed communication split by collective kind: the timeline's exposed time (communication
// running while no compute does) shared among the collectives running at each instant, so the
// parts add up to the step's exposed_comm_s. The replay computes it from its timeline
// (SimulationOptions::exposed_by_kind); trainer/simulate/exposed_comm.h sums it over a pipeline.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "devices/step_simulator.h"

namespace titan::devices {

class ExposedByKind {
 public:
  // One task as it ran; a communication task's kind is the first word of its category
  // ("all_gather dp_shard": all_gather). Host tasks and empty stretches are skipped.
  void add(StreamKind kind, const std::string& category, double start_s, double end_s);
  // One item per kind with exposed time, largest first (ties in the order first seen).
  std::vector<CostItem> result();

 private:
  struct Edge {
    double t;
    int kind;  // -1: compute; >= 0: index of a collective kind
    int delta;
  };
  std::vector<std::string> kinds_;
  std::map<std::string, int> kind_of_;
  std::string last_category_;  // the category last looked up and its kind: runs share one
  int last_kind_ = -1;
  std::vector<Edge> edges_;
};

}  // namespace titan::devices
