#include "trainer/step/param_layout.h"

#include "common/error.h"
#include "parallel/fsdp.h"
#include "parallel/tensor_parallel.h"
#include "trainer/step/expert_plan.h"
#include "trainer/step/pipeline_model.h"
#include "trainer/step/trainer.h"

namespace titan {

std::vector<ParamLayout> param_layout(Trainer& t) {
  Communicator& tp = *t.mesh()["tp"];
  std::vector<ParamLayout> out;
  for (auto& p : t.optimizer().params()) {
    ParamLayout l;
    l.name = p.name;
    // The box: what this rank holds before FSDP, as the FSDP plan recorded it.
    FsdpShard shard;
    if (t.fsdp()) {
      shard = t.fsdp()->shard_of(p.param);
      l.box_shape = shard.full_shape;
    } else {
      l.box_shape = p.param.sizes().vec();
    }
    l.global_shape = l.box_shape;
    l.box_offset.assign(l.box_shape.size(), 0);
    // TP (applied before FSDP): this rank holds block tp.rank() / replicas of dim tp_dim
    // (replicas > 1: KV heads held by several tp ranks).
    l.tp_dim = tp.size() > 1 ? t.tp_shard_dim(p.name) : -1;
    const int64_t replicas = l.tp_dim >= 0 ? t.tp_shard_replicas(p.name) : tp.size();
    if (l.tp_dim >= 0) {
      l.global_shape[l.tp_dim] *= tp.size() / replicas;
      l.box_offset[l.tp_dim] = (tp.rank() / replicas) * l.box_shape[l.tp_dim];
    }
    l.writes = tp.rank() % replicas == 0;  // one copy of what several tp ranks hold
    // Expert parallelism: ep rank r holds experts [r L, (r+1) L) of dim 0 (each written by
    // its holder; a resume under another degree reads its own experts' rows).
    if (Communicator* ep = t.ep_group(); ep && is_expert_module(p.name)) {
      l.ep_split = true;
      l.global_shape[0] *= ep->size();
      l.box_offset[0] = ep->rank() * l.box_shape[0];
    }
    // A tied embedding under PP: the first stage writes it, the last stage's copy loads it.
    if (t.pipeline() && t.pipeline()->tied_copy() && p.name == "tok_embeddings.weight") l.writes = false;
    if (t.fsdp()) {
      l.flat_offset = shard.offset, l.length = shard.length;
    } else {
      l.flat_offset = 0, l.length = p.param.numel();
    }
    out.push_back(std::move(l));
  }
  return out;
}

bool writes_tensors(Trainer& t) { return !t.mesh().has("dp_replicate") || t.mesh().coordinate("dp_replicate") == 0; }

torch::Tensor full_parameter(Trainer& t, size_t i, const ParamLayout& l) {
  torch::NoGradGuard no_grad;
  auto& p = t.optimizer().params()[i].param;
  // Expert weights under EP are FSDP-sharded over efsdp (the unit's own group), then split over ep.
  Communicator& shard_group = l.ep_split ? t.fsdp()->shard_group_of(p) : *t.mesh()["fsdp"];
  torch::Tensor box = t.fsdp() ? gather_full_parameter(shard_group, p, l.box_shape) : p.detach().clone();
  if (l.ep_split) box = gather_tp_blocks(box, 0, 1, *t.ep_group());
  if (l.tp_dim < 0) return box;
  return gather_tp_blocks(box, l.tp_dim, t.tp_shard_replicas(l.name), *t.mesh()["tp"]);
}

void assign_from_full(Trainer& t, size_t i, const ParamLayout& l, const torch::Tensor& full) {
  torch::NoGradGuard no_grad;
  auto& p = t.optimizer().params()[i].param;
  auto box = full.view(l.global_shape);
  for (size_t d = 0; d < l.box_shape.size(); ++d) box = box.narrow(d, l.box_offset[d], l.box_shape[d]);
  auto flat = box.contiguous().reshape({-1}).to(p.scalar_type());
  p.view({-1}).narrow(0, 0, l.length).copy_(flat.narrow(0, l.flat_offset, l.length));
}

}  // namespace titan
