#include "trainer/simulate/extrapolated_run.h"

#include <array>

#include "trainer/simulate/layer_extrapolation.h"

namespace titan {

std::optional<SimulationResult> simulate_by_layer_extrapolation(const JobConfig& cfg) {
  if (!cfg.simulation.layer_extrapolation) return std::nullopt;
  // Deeper samples while the shallowest is still in a transient, as the study does
  // (study/evaluate.cpp), each depth recorded once.
  for (LayerSamples s = layer_samples(cfg); s.ok; s = deeper_samples(s)) {
    std::array<ReplayFigures, 3> f;
    std::optional<RecordedStep> first;
    for (size_t j = 0; j < 3; ++j) {
      const JobConfig c = with_layers(cfg, s.layers[j]);
      RecordedStep rec = record_step(c);
      f[j] = replay_figures(c, rec, rec.chip, rec.placement);
      if (!first) first = std::move(rec);
    }
    const Extrapolation x = extrapolate_layers(s, f);
    if (x.ok) return finish_replay(cfg, x.figures, first->chip, first->placement);
  }
  return std::nullopt;
}

}  // namespace titan
