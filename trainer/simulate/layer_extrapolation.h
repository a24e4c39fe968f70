// Layer extrapolation: a transformer's blocks are identical, so once the first blocks'
// transients are past, every block a step adds changes each simulated figure (step time,
// busy and exposed times, costs per category, kernel counts, parameters stored) by the same
// amount. A study therefore records and replays the step at three shallow depths, one "layer
// step" apart, and extends every figure linearly to the config's depth. Each figure's second
// difference over the three must be zero (to 1e-9 of its size; counts exactly); if not, the
// samples move one step deeper (the shallowest was still in a transient), and once they would
// hold as many layers as the config, the config is recorded at its own depth: a step that is
// not affine in depth over the samples is never extrapolated. Under PP each segment's cost is
// extended and the schedule composed again (a makespan is a maximum over paths). tests/study compares the
// extrapolated figures with full-depth recordings (FSDP, TP, HSDP, PP, both collective modes).
// Used by study/evaluate.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "trainer/config/job_config.h"
#include "trainer/simulate/simulate.h"

namespace titan {

// The depths a config is sampled at. A layer step adds the same blocks to every pipeline
// stage (the stage count x the activation-checkpoint period: selective AC recomputes every
// selective_every-th block, so blocks repeat with that period), and every sample keeps the
// config's remainder of layers over the step, so the stages split like the config's.
struct LayerSamples {
  bool ok = false;
  std::string why;                  // not ok: why the config is recorded at its own depth
  int64_t target_layers = 0, step = 1;
  std::array<int64_t, 3> layers{};  // n_layers of the three samples
};
LayerSamples layer_samples(const JobConfig& cfg);
// The same samples one layer step deeper (where the shallowest was still in a transient);
// not ok once they would hold as many layers as the config.
LayerSamples deeper_samples(const LayerSamples& s);

// cfg with model.n_layers = n (every other key as it was).
JobConfig with_layers(const JobConfig& cfg, int64_t n_layers);

struct Extrapolation {
  bool ok = false;
  std::string why;  // not ok: the first figure that is not affine in depth
  ReplayFigures figures;
};

// f[i]: the replay of the sample at s.layers[i] (same chip, placement and options).
Extrapolation extrapolate_layers(const LayerSamples& s, const std::array<ReplayFigures, 3>& f);

}  // namespace titan
