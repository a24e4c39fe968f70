// Study points (see evaluate.h).
#include "study/evaluate.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"
#include "trainer/config/config_keys.h"
#include "trainer/config/config_loader.h"
#include "trainer/step/trainer.h"

namespace titan::study {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kOk: return "ok";
    case Verdict::kDoesNotFit: return "oom";
    case Verdict::kInvalid: break;
  }
  return "invalid";
}

Breakdown breakdown_of(const SimulationResult& r) {
  const auto& s = r.report;
  Breakdown b;
  b.compute_s = s.compute_s;
  b.exposed_comm_s = s.exposed_comm_s;
  for (const auto& c : s.costs)
    if (c.category.rfind("pipeline bubble", 0) == 0) b.bubble_s += c.seconds;
  // What is left of the step: the timeline's idle time (the bubble is part of it under PP).
  b.idle_s = std::max(0.0, s.step_time_s - b.compute_s - b.exposed_comm_s - b.bubble_s);
  return b;
}

std::string key_value(const JobConfig& cfg, const std::string& key) {
  JobConfig copy = cfg;
  Registry reg = make_registry(copy);
  for (const auto& s : reg.keys) {
    if (s.full() != key) continue;
    std::ostringstream os;
    os.precision(12);
    std::visit(
        [&](const auto& f) {
          using F = std::decay_t<decltype(f)>;
          if constexpr (std::is_same_v<F, EnumField>) os << f.names[f.get()];
          else if constexpr (std::is_same_v<F, bool*>) os << (*f ? "true" : "false");
          else if constexpr (std::is_same_v<F, std::vector<std::string>*>) {
            for (size_t i = 0; i < f->size(); ++i) os << (i ? " " : "") << (*f)[i];
          } else os << *f;
        },
        s.field);
    return os.str();
  }
  TITAN_CONFIG_CHECK(false, "unknown config key '", key, "'");
  return {};
}

Point evaluate_config(const JobConfig& cfg, RecordingCache& cache) {
  Point p;
  p.cfg = cfg;
  try {
    const std::shared_ptr<const RecordedStep> rec = cache.get(cfg);
    const devices::ChipSpec chip = simulated_chip(cfg);
    const devices::Placement placement =
        devices::place_on_device(chip, cfg.simulation.num_chips, mesh_dims(rec->dims), cfg.simulation.topology);
    p.result = replay_step(cfg, *rec, chip, placement);
    p.breakdown = breakdown_of(p.result);
    if (p.result.memory.fits || cfg.simulation.allow_oom) {
      p.verdict = Verdict::kOk;
    } else {
      p.verdict = Verdict::kDoesNotFit;
      p.reason = "memory: " + p.result.memory.describe();
    }
  } catch (const std::exception& e) {  // titan config errors, and torch's for impossible shapes
    p.verdict = Verdict::kInvalid;
    p.reason = e.what();
  }
  return p;
}

Point evaluate(const JobConfig& base, const Overrides& overrides, RecordingCache& cache) {
  JobConfig cfg = base;
  try {
    for (const auto& [k, v] : overrides) apply_override(cfg, k, v);
    validate(cfg);
  } catch (const Error& e) {
    Point p;
    p.overrides = overrides;
    p.cfg = cfg;
    p.reason = e.what();
    return p;
  }
  Point p = evaluate_config(cfg, cache);
  p.overrides = overrides;
  return p;
}

}  // namespace titan::study
