// titan-train's simulation of a deep model from three shallow recordings (layer extrapolation,
// layer_extrapolation.h), under simulation.layer_extrapolation: the figures a full-depth
// recording gives, in a fraction of its wall time (an MoE block records one product per
// expert, so Qwen3-30B-A3B's 48 blocks hold ~10^5 ops).
#pragma once

#include <optional>
#include <string>

#include "trainer/config/job_config.h"
#include "trainer/simulate/simulate.h"

namespace titan {

// The result for cfg's depth, or nullopt when the option is off or the samples do not extend
// (too shallow, or a figure not affine in depth): the caller then records cfg at its depth,
// and *why (when given and the option was on) says which.
std::optional<SimulationResult> simulate_by_layer_extrapolation(const JobConfig& cfg, std::string* why = nullptr);

}  // namespace titan
