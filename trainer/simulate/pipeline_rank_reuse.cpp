#include "trainer/simulate/pipeline_rank_reuse.h"

#include <algorithm>
#include <optional>

#include "trainer/simulate/simulate_pipeline.h"

namespace titan {

std::vector<int64_t> pipeline_rank_key(const PipeSchedule& s, const std::vector<StageLayers>& stages,
                                       const JobConfig& cfg, int rank) {
  const auto& ac = cfg.activation_checkpoint;
  // Layer-level selective AC recomputes layer l when (l + 1) % every == 0 (global indices).
  const int64_t every = ac.mode == AcMode::kSelective && !ac.op_level() ? ac.every() : 1;
  std::vector<int64_t> key;
  for (int st : s.stages_of(rank)) {
    const StageLayers& l = stages.at(static_cast<size_t>(st));
    key.insert(key.end(), {l.end - l.begin, l.embedding, l.output, st == 0, st == s.num_stages - 1,
                           st > 0 && s.stage_rank[st - 1] == rank,
                           st + 1 < s.num_stages && s.stage_rank[st + 1] == rank});
    for (int64_t layer = l.begin; every > 1 && layer < l.end; ++layer) key.push_back((layer + 1) % every == 0);
  }
  return key;
}

bool copy_pipeline_rank(RecordedPipeline& rec, const std::vector<ResizePlace>& p_resizes, int p, int q) {
  const PipeSchedule& s = rec.schedule;
  const std::vector<int> p_stages = s.stages_of(p), q_stages = s.stages_of(q);
  if (p_stages.size() != q_stages.size()) return false;
  auto local = [](const std::vector<int>& of, int stage) {
    const auto at = std::find(of.begin(), of.end(), stage);
    return at == of.end() ? -1 : static_cast<int>(at - of.begin());
  };
  const std::vector<PipelineSegment>& segs = rec.ranks[p];
  const SegmentIndex index = index_segments(segs);
  // p's first action of each schedule run: what comes before it (that run's batch) comes
  // before q's first action of the run; what comes before any other action comes with it.
  const size_t none = segs.size();
  std::vector<size_t> run_first(static_cast<size_t>(rec.runs), none);
  for (size_t i = 0; i < segs.size(); ++i) {
    const int run = segs[i].run;
    if (!segs[i].is_action) continue;
    if (run < 0 || run >= rec.runs || local(p_stages, segs[i].action.stage) < 0) return false;
    if (run_first[run] == none) run_first[run] = i;
  }
  std::vector<size_t> order;
  std::vector<std::optional<PipeAction>> as;  // q's action for each, relabelled
  for (int run = 0; run < rec.runs; ++run) {
    if (run_first[run] == none) return false;
    for (size_t i : index.plain_before[run_first[run]]) order.push_back(i), as.emplace_back();
    for (const PipeAction& a : s.ranks[q]) {
      const int st = local(q_stages, a.stage);
      if (st < 0) return false;
      const auto at = index.action_at.find({run, static_cast<int>(a.op), p_stages[st], a.microbatch});
      if (at == index.action_at.end()) return false;
      if (at->second != run_first[run])
        for (size_t i : index.plain_before[at->second]) order.push_back(i), as.emplace_back();
      order.push_back(at->second), as.emplace_back(a);
    }
  }
  for (size_t i : index.plain_after) order.push_back(i), as.emplace_back();
  // One to one: every segment of p exactly once.
  std::vector<char> used(segs.size(), 0);
  for (size_t i : order) {
    if (used[i]) return false;
    used[i] = 1;
  }
  if (order.size() != segs.size()) return false;

  std::vector<PipelineSegment>& out = rec.ranks[q];
  out.clear();
  out.reserve(order.size());
  std::vector<int64_t> op_begin(segs.size(), 0);  // where each of p's segments starts in q's step
  int64_t ops = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    out.push_back(segs[order[k]]);
    if (as[k]) out.back().action = *as[k];
    op_begin[order[k]] = ops;
    ops += static_cast<int64_t>(segs[order[k]].trace.compute_ops());
  }
  // The resizes, each at the same place in its segment, in q's order (the walk reads them by
  // increasing op).
  const auto& resizes = rec.storage_resizes[p];
  std::vector<std::vector<size_t>> resizes_in(segs.size());
  for (size_t j = 0; j < resizes.size(); ++j) resizes_in.at(p_resizes.at(j).segment).push_back(j);
  std::vector<devices::StorageResize>& moved = rec.storage_resizes[q];
  moved.clear();
  for (size_t i : order)
    for (size_t j : resizes_in[i]) moved.push_back({op_begin[i] + p_resizes[j].op, resizes[j].id, resizes[j].bytes});
  rec.storages[q] = rec.storages[p];
  rec.calls[q] = rec.calls[p];
  rec.local_params[q] = rec.local_params[p];
  rec.holds_output[q] = s.stage_rank[s.num_stages - 1] == q;
  rec.memory[q] = rank_memory(rec, q);
  rec.copied_from[q] = p;
  rec.copied_segment[q] = std::move(order);
  return true;
}

}  // namespace titan
