#include "trainer/simulate/extrapolated_run.h"

#include <array>
#include <vector>

#include "trainer/simulate/layer_extrapolation.h"

namespace titan {

std::optional<SimulationResult> simulate_by_layer_extrapolation(const JobConfig& cfg, std::string* why) {
  if (!cfg.simulation.layer_extrapolation) return std::nullopt;
  std::string reason;
  std::vector<std::string> rejected;
  // Deeper samples while the shallowest is still in a transient, as the study does
  // (study/evaluate.cpp), each depth recorded once.
  LayerSamples s = layer_samples(cfg);
  for (; s.ok; s = deeper_samples(s)) {
    std::array<ReplayFigures, 3> f;
    std::optional<RecordedStep> first;
    for (size_t j = 0; j < 3; ++j) {
      const JobConfig c = with_layers(cfg, s.layers[j]);
      RecordedStep rec = record_step(c);
      f[j] = replay_figures(c, rec, rec.chip, rec.placement);
      if (!first) first = std::move(rec);
    }
    const Extrapolation x = extrapolate_layers(s, f);
    if (x.ok) {
      SimulationResult r = finish_replay(cfg, x.figures, first->chip, first->placement);
      r.extrapolated_from_layers.assign(s.layers.begin(), s.layers.end());
      r.rejected_samples = std::move(rejected);
      return r;
    }
    reason = x.why;  // the deepest samples' failure is the one that sent it to full depth
    rejected.push_back(std::to_string(s.layers[0]) + ", " + std::to_string(s.layers[1]) + ", " +
                       std::to_string(s.layers[2]) + ": " + x.why);
  }
  if (why) *why = reason.empty() ? s.why : reason + " (then: " + s.why + ")";
  return std::nullopt;
}

}  // namespace titan
