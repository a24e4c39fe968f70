#include "trainer/step/param_layout.h"

#include "common/error.h"
#include "parallel/fsdp.h"
#include "parallel/tensor_parallel.h"
#include "trainer/step/trainer.h"

namespace titan {

std::vector<ParamLayout> param_layout(Trainer& t) {
  TITAN_CONFIG_CHECK(t.dims().pp == 1, "checkpointing with pipeline parallelism is not implemented yet (",
                     t.dims().to_string(), "); see docs/checkpoint_format.md");
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
    // TP (applied before FSDP): this rank holds block tp.rank() of dim tp_dim.
    l.tp_dim = tp.size() > 1 ? t.tp_shard_dim(p.name) : -1;
    if (l.tp_dim >= 0) {
      l.global_shape[l.tp_dim] *= tp.size();
      l.box_offset[l.tp_dim] = tp.rank() * l.box_shape[l.tp_dim];
    }
    l.writes = l.tp_dim >= 0 || tp.rank() == 0;  // replicated over tp: tp rank 0's copy only
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
  torch::Tensor box = t.fsdp() ? gather_full_parameter(*t.mesh()["fsdp"], p, l.box_shape) : p.detach().clone();
  if (l.tp_dim < 0) return box;
  return all_gather_along(box, l.tp_dim, *t.mesh()["tp"]).contiguous();
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
