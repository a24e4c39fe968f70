#include "trainer/simulate/extrapolated_run.h"

#include <array>
#include <map>
#include <vector>

#include "trainer/simulate/layer_extrapolation.h"

namespace titan {

std::optional<SimulationResult> simulate_by_layer_extrapolation(const JobConfig& cfg, std::string* why) {
  if (!cfg.simulation.layer_extrapolation) return std::nullopt;
  std::string reason;
  std::vector<std::string> rejected;
  // Deeper samples while the shallowest is still in a transient, as the study does
  // (study/evaluate.cpp). Each depth is recorded once: the deeper samples share two depths
  // with the ones before (30B-A3B PP 2: 4, 8, 12 then 8, 12, 16 record 40 layers, not 60).
  std::map<int64_t, ReplayFigures> replayed;
  std::optional<devices::ChipSpec> chip;
  devices::Placement placement;
  LayerSamples s = layer_samples(cfg);
  for (; s.ok; s = deeper_samples(s)) {
    std::array<ReplayFigures, 3> f;
    for (size_t j = 0; j < 3; ++j) {
      auto it = replayed.find(s.layers[j]);
      if (it == replayed.end()) {
        const JobConfig c = with_layers(cfg, s.layers[j]);
        const RecordedStep rec = record_step(c);
        it = replayed.emplace(s.layers[j], replay_figures(c, rec, rec.chip, rec.placement)).first;
        if (!chip) chip = rec.chip, placement = rec.placement;
      }
      f[j] = it->second;
    }
    const Extrapolation x = extrapolate_layers(s, f);
    if (x.ok) {
      SimulationResult r = finish_replay(cfg, x.figures, *chip, placement);
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
