// Exposed communication by collective kind, summed over a pipeline's ranks or segments (a
// replay's own split: SimulationOptions::exposed_by_kind, devices/exposed_by_kind.h). Used by
// the pipeline replay and the study's step-time breakdown.
#pragma once

#include <vector>

#include "devices/step_simulator.h"

namespace titan {

// Adds `add` into `sum` by kind (kinds first seen in `add` are appended).
void add_by_kind(std::vector<devices::CostItem>& sum, const std::vector<devices::CostItem>& add);

}  // namespace titan
