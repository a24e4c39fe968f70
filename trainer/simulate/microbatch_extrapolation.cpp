// Micro-batch extrapolation (see microbatch_extrapolation.h): which micro-batch count a
// named schedule is recorded with, and the full schedule's program over those recordings.
#include "trainer/simulate/microbatch_extrapolation.h"

#include <algorithm>
#include <optional>
#include <set>

#include "common/error.h"
#include "trainer/simulate/simulate_pipeline.h"

namespace titan {
namespace {

// What a rank's memory at any moment depends on in a schedule: per stage it holds, how many
// micro-batches' full activations (forward done, no backward yet), deferred weight-gradient
// inputs (I done, W not) and received but unused activations and gradients it holds, and
// whether its gradients exist yet (after its first backward action). Per rank, the set of
// states it passes through: once a schedule's steady state is long enough to visit every
// state the full count visits, more micro-batches only repeat them, and the step's memory
// peak is the same. (The peak count alone is not: 1F1B with as many micro-batches as ranks
// reaches it only before any gradient exists.)
std::vector<std::set<std::vector<int>>> memory_states(const PipeSchedule& s) {
  std::vector<std::set<std::vector<int>>> out(s.ranks.size());
  constexpr size_t kHeld = 0, kDeferred = 1, kActIn = 2, kGradIn = 3, kPerStage = 4;
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const std::vector<int> stages = s.stages_of(static_cast<int>(r));
    std::vector<int> state(1 + kPerStage * stages.size(), 0);  // gradients exist, then per stage
    for (const PipeAction& a : s.ranks[r]) {
      const auto at = std::find(stages.begin(), stages.end(), a.stage);
      if (at == stages.end()) continue;
      int* st = &state[1 + kPerStage * static_cast<size_t>(at - stages.begin())];
      auto use = [](int& n) { n = std::max(0, n - 1); };
      switch (a.op) {
        case PipeOp::kRecvF: ++st[kActIn]; break;
        case PipeOp::kRecvB: ++st[kGradIn]; break;
        case PipeOp::kForward: ++st[kHeld], use(st[kActIn]); break;
        case PipeOp::kBackward: --st[kHeld], use(st[kGradIn]), state[0] = 1; break;
        case PipeOp::kBackwardInput: --st[kHeld], ++st[kDeferred], use(st[kGradIn]), state[0] = 1; break;
        case PipeOp::kBackwardWeight: --st[kDeferred]; break;
        default: break;
      }
      out[r].insert(state);
    }
  }
  return out;
}

}  // namespace

int recorded_microbatch_count(const PipeSchedule& full) {
  const int m = full.num_microbatches;
  bool reduce_grad = false;
  for (const auto& acts : full.ranks)
    for (const PipeAction& a : acts) reduce_grad = reduce_grad || a.op == PipeOp::kReduceGrad;
  auto build = [&](int k) -> std::optional<PipeSchedule> {
    try {
      return make_pipeline_schedule(full.name, full.num_ranks, full.num_stages, k, reduce_grad);
    } catch (const Error&) {  // not a named schedule, or too few micro-batches for it
      return std::nullopt;
    }
  };
  const auto again = build(m);
  if (!again || again->ranks != full.ranks) return m;  // loaded from a file: replayed as recorded
  const auto states = memory_states(full);
  // A schedule of k micro-batches holds at most k activations of a stage at once: no count
  // below the full schedule's most held reaches its states, so the search starts there (a
  // deep pipeline's 1F1B holds as many as it has ranks; building and checking each shorter
  // schedule was a tenth of a PP 64 simulation).
  int most_held = 0;
  for (const auto& rank_states : states)
    for (const std::vector<int>& st : rank_states)
      for (size_t i = 1; i < st.size(); i += 4) most_held = std::max(most_held, st[i]);
  // Every schedule's warm-up holds at most two rounds of its stages; a count that has not
  // visited the full one's states by then never will (GPipe, whose peak is every micro-batch).
  for (int k = std::max(3, most_held); k < m && k <= 2 * full.num_stages + 4; ++k) {
    const auto s = build(k);
    if (s && memory_states(*s) == states) return k;
  }
  return m;
}

std::vector<std::vector<ReplayedSegment>> extrapolated_program(const RecordedPipeline& rec, const PipeSchedule& full,
                                                                int recorded) {
  const int m = full.num_microbatches;
  auto stand_in = [&](int mb) { return mb < recorded - 1 ? mb : mb == m - 1 ? recorded - 1 : recorded - 2; };
  std::vector<std::vector<ReplayedSegment>> program(rec.ranks.size());
  for (size_t q = 0; q < rec.ranks.size(); ++q) {
    const auto& segs = rec.ranks[q];
    const SegmentIndex index = index_segments(segs);
    auto& out = program[q];
    for (int run = 0; run < rec.runs; ++run) {
      for (const PipeAction& a : full.ranks[q]) {
        const int mb = a.microbatch < 0 ? a.microbatch : stand_in(a.microbatch);
        const auto at = index.action_at.find({run, static_cast<int>(a.op), a.stage, mb});
        TITAN_CHECK(at != index.action_at.end(), "pipeline simulation: rank ", q, " recorded no ",
                    PipeAction{a.op, a.stage, mb}.to_string(), " in run ", run, " to stand in for ", a.to_string());
        for (size_t i : index.plain_before[at->second]) out.push_back({i, segs[i].action, run});
        out.push_back({at->second, a, run});
      }
      if (run == rec.runs - 1)
        for (size_t i : index.plain_after) out.push_back({i, segs[i].action, run});
    }
  }
  return program;
}

JobConfig with_microbatches(const JobConfig& cfg, int m, int k) {
  JobConfig c = cfg;
  c.training.local_batch_size = cfg.training.local_batch_size / m * k;
  if (cfg.training.global_batch_size > 0) c.training.global_batch_size = cfg.training.global_batch_size / m * k;
  return c;
}

}  // namespace titan
