// Study points (see evaluate.h).
#include "study/evaluate.h"

#include <algorithm>
#include <array>
#include <optional>
#include <sstream>

#include "common/error.h"
#include "devices/replay_memo.h"
#include "trainer/config/config_keys.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/resolve_model.h"
#include "trainer/simulate/layer_extrapolation.h"
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
  b.exposed_by_kind = r.exposed_comm_by_kind;
  for (const auto& c : s.costs)
    if (c.category.rfind("pipeline bubble", 0) == 0) b.bubble_s += c.seconds;
  // What is left of the step: the timeline's idle time (the bubble is part of it under PP).
  b.idle_s = std::max(0.0, s.step_time_s - b.compute_s - b.exposed_comm_s - b.bubble_s);
  return b;
}

std::string ac_choice(const JobConfig& cfg) {
  return cfg.activation_checkpoint.op_level() ? "op" : to_string(cfg.activation_checkpoint.mode);
}

// Read through the shared key table (KeyTable): a registry built per call was 7% of a study
// process's instructions, nearly all in writing the result rows (some twenty keys a row).
std::string key_value(const JobConfig& cfg, const std::string& key) {
  const KeyTable& table = KeyTable::get();
  const KeySpec* s = table.find(key);
  TITAN_CONFIG_CHECK(s, "unknown config key '", key, "'");
  std::ostringstream os;
  os.precision(12);
  std::visit(
      [&](const auto& f) {
        using F = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<F, EnumField>) os << f.names[f.read(table.in(cfg, static_cast<const char*>(f.at)))];
        else if constexpr (std::is_same_v<F, bool*>) os << (*table.in(cfg, f) ? "true" : "false");
        else if constexpr (std::is_same_v<F, std::vector<std::string>*>) {
          const auto& v = *table.in(cfg, f);
          for (size_t i = 0; i < v.size(); ++i) os << (i ? " " : "") << v[i];
        } else os << *table.in(cfg, f);
      },
      s->field);
  return os.str();
}

namespace {

using RecordingFuture = std::shared_future<std::shared_ptr<const RecordedStep>>;

// Each evaluating thread's replays (devices/replay_memo.h): a layout's points are evaluated
// one after the other on one thread, and their resized steps share most pipeline segments.
devices::ReplayMemo& thread_memo() {
  thread_local devices::ReplayMemo memo;
  return memo;
}

// f's result, with the replays the memo answered meanwhile counted on the cache.
template <class F>
auto with_memo(RecordingCache& cache, F&& f) {
  devices::ReplayMemo& m = thread_memo();
  const int64_t hits = m.hits, misses = m.misses;
  auto out = f(&m);
  cache.replays_remembered += m.hits - hits;
  cache.replays_named += m.hits - hits + m.misses - misses;
  return out;
}

// The i-th recording prefetch queued, if it queued what this caller asks for (the three layer
// samples, or the config itself), counted as a lookup; else cfg's, asked for now.
RecordingFuture take_or_request(const JobConfig& cfg, RecordingCache& cache, Prefetched* pre, bool sampled, size_t i) {
  if (pre && pre->sampled == sampled && pre->recs.size() == (sampled ? 3u : 1u)) {
    cache.count_lookup();
    return std::move(pre->recs[i]);
  }
  return cache.request(cfg);
}

// The point's figures from three shallow recordings (layer_extrapolation.h); false when the
// config does not sample (too shallow, stage count follows depth), a sample fails to record
// (a depth the stage split refuses) or a figure is not affine in depth: the caller then
// records the config at its own depth.
bool extrapolated_result(const JobConfig& cfg, const devices::ChipSpec& chip, RecordingCache& cache,
                         SimulationResult* out, std::string* why, Prefetched* pre) {
  std::optional<devices::Placement> placement;
  // The figures of the last samples by depth: deeper samples move one layer step, so two of
  // the three were replayed already.
  std::array<std::pair<int64_t, ReplayFigures>, 3> last;
  for (auto& l : last) l.first = -1;
  for (LayerSamples s = layer_samples(cfg);; s = deeper_samples(s)) {
    if (!s.ok) {
      *why = why->empty() ? s.why : *why + "; " + s.why;
      return false;
    }
    std::array<ReplayFigures, 3> f;
    std::array<bool, 3> have{};
    for (size_t j = 0; j < 3; ++j)
      for (auto& l : last)
        if (!have[j] && l.first == s.layers[j]) f[j] = std::move(l.second), have[j] = true, l.first = -1;
    std::array<JobConfig, 3> cfgs;
    std::array<RecordingFuture, 3> recs;
    // The first samples' recordings: prefetch asked for them already.
    for (size_t j = 0; j < 3; ++j) {
      if (have[j]) continue;
      cfgs[j] = with_layers(cfg, s.layers[j]);
      recs[j] = take_or_request(cfgs[j], cache, pre, /*sampled=*/true, j);
    }
    if (pre) pre->recs.clear();
    try {
      for (size_t j = 0; j < 3; ++j) {
        if (have[j]) continue;
        const std::shared_ptr<const RecordedStep> rec = recs[j].get();
        if (!placement)
          placement =
              devices::place_on_device(chip, cfg.simulation.num_chips, mesh_dims(rec->dims), cfg.simulation.topology);
        f[j] = with_memo(cache, [&](devices::ReplayMemo* m) {
          return replay_figures(cfgs[j], *rec, chip, *placement, /*keep_events=*/false, m);
        });
      }
    } catch (const std::exception& e) {
      *why = std::string("a sample failed: ") + e.what();
      return false;
    }
    const Extrapolation x = extrapolate_layers(s, f);
    if (x.ok) {
      *out = finish_replay(cfg, x.figures, chip, *placement);
      out->extrapolated_from_layers.assign(s.layers.begin(), s.layers.end());  // as titan-train reports it
      why->clear();
      return true;
    }
    *why = x.why;  // kept if no deeper samples pay off
    ++cache.failed_fits;
    for (size_t j = 0; j < 3; ++j) last[j] = {s.layers[j], std::move(f[j])};
  }
}

}  // namespace

Point evaluate_config(const JobConfig& cfg, RecordingCache& cache, Prefetched* pre) {
  Point p;
  p.cfg = cfg;
  try {
    const devices::ChipSpec chip = simulated_chip(cfg);
    p.extrapolated = cache.layer_extrapolation &&
                     extrapolated_result(cfg, chip, cache, &p.result, &p.full_depth_reason, pre);
    ++(p.extrapolated ? cache.extrapolated : cache.full_depth);
    if (!p.extrapolated) {
      RecordingFuture fut = take_or_request(cfg, cache, pre, /*sampled=*/false, 0);
      if (pre) pre->recs.clear();
      const std::shared_ptr<const RecordedStep> rec = fut.get();
      fut = {};
      const devices::Placement placement =
          devices::place_on_device(chip, cfg.simulation.num_chips, mesh_dims(rec->dims), cfg.simulation.topology);
      p.result = with_memo(cache, [&](devices::ReplayMemo* m) {
        return replay_step(cfg, *rec, chip, placement, /*keep_events=*/false, m);
      });
    }
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

Prefetched plan_prefetch(const JobConfig& base, const Overrides& overrides, const RecordingCache& cache) {
  Prefetched pre;
  try {
    JobConfig cfg = base;
    for (const auto& [k, v] : overrides) apply_override(cfg, k, v);
    validate(cfg);
    const LayerSamples s = cache.layer_extrapolation ? layer_samples(cfg) : LayerSamples{};
    pre.sampled = s.ok;
    // The config's own depth as its model resolves it: model.n_layers is 0 under a flavor.
    pre.layers = s.ok ? std::vector<int64_t>(s.layers.begin(), s.layers.end())
                      : std::vector<int64_t>{resolve_model_args(cfg, vocab_without_data(cfg)).n_layers};
    pre.cfg = std::move(cfg);
    pre.ok = true;
  } catch (const std::exception&) {
    // evaluate() reports it
    pre = Prefetched{};
  }
  return pre;
}

void queue_prefetch(Prefetched& pre, RecordingCache& cache) {
  if (!pre.ok) return;
  try {
    for (int64_t n : pre.layers)
      pre.recs.push_back(cache.request(pre.sampled ? with_layers(pre.cfg, n) : pre.cfg, /*counted=*/false));
  } catch (const std::exception&) {
    pre = Prefetched{};  // evaluate() reports it
  }
}

Prefetched prefetch(const JobConfig& base, const Overrides& overrides, RecordingCache& cache) {
  Prefetched pre = plan_prefetch(base, overrides, cache);
  queue_prefetch(pre, cache);
  return pre;
}

Point evaluate(const JobConfig& base, const Overrides& overrides, RecordingCache& cache, Prefetched* pre) {
  if (pre && pre->ok) {
    Point p = evaluate_config(pre->cfg, cache, pre);
    p.overrides = overrides;
    return p;
  }
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
