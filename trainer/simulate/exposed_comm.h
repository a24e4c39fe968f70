// Exposed communication split by collective kind: the timeline's exposed time (communication
// running while no compute does) shared among the collectives running at each instant, so
// the parts add up to StepReport::exposed_comm_s. Used by simulate.cpp and the study's
// step-time breakdown.
#pragma once

#include <vector>

#include "devices/step_simulator.h"

namespace titan {

// From r.events (a replay with keep_events): one item per collective kind ("all_gather",
// "reduce_scatter", ...: the first word of the task's category), largest first. A replay
// with SimulationOptions::exposed_by_kind gives the same in StepReport::exposed_by_kind
// without keeping its events (devices/exposed_by_kind.h).
std::vector<devices::CostItem> exposed_by_kind(const devices::StepReport& r);

// Adds `add` into `sum` by kind (kinds first seen in `add` are appended).
void add_by_kind(std::vector<devices::CostItem>& sum, const std::vector<devices::CostItem>& add);

}  // namespace titan
