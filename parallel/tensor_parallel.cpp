#include "parallel/tensor_parallel.h"

#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"
#include "trainer/model/hooks/op_save_hook.h"

namespace titan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Communicator& comm_of(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(ctx->saved_data["tp"].toInt());
}

int64_t handle(Communicator& tp) { return reinterpret_cast<int64_t>(&tp); }

}  // namespace

torch::Tensor all_gather_along(const torch::Tensor& x, int64_t dim, Communicator& group) {
  auto in = x.movedim(dim, 0).contiguous();  // a rank's block is contiguous
  auto sizes = in.sizes().vec();
  sizes[0] *= group.size();
  auto out = torch::empty(sizes, in.options());
  group.all_gather(out, in)->wait();
  return out.movedim(0, dim);
}

namespace {

torch::Tensor all_reduce_copy(const torch::Tensor& x, Communicator& tp) {
  auto y = x.contiguous().clone();
  tp.all_reduce(y, ReduceOp::kSum)->wait();
  return y;
}

// [B, S, ...] -> [B, S * group, ...]: every rank's sequence block, in rank order.
torch::Tensor all_gather_seq(const torch::Tensor& x, Communicator& tp) { return all_gather_along(x, 1, tp); }

// [B, S, ...] partial sums -> [B, S / group, ...]: this rank's block, summed over the group.
torch::Tensor reduce_scatter_seq(const torch::Tensor& x, Communicator& tp) {
  TITAN_CHECK(x.size(1) % tp.size() == 0, "sequence parallel: sequence length ", x.size(1),
              " is not divisible by the tensor-parallel degree ", tp.size());
  auto in = x.transpose(0, 1).contiguous();
  auto sizes = in.sizes().vec();
  sizes[0] /= tp.size();
  auto out = torch::empty(sizes, in.options());
  tp.reduce_scatter(out, in, ReduceOp::kSum)->wait();
  return out.transpose(0, 1);
}

torch::Tensor all_gather_last(const torch::Tensor& x, Communicator& tp) { return all_gather_along(x, -1, tp); }

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_reduce_copy(g[0], comm_of(ctx)), torch::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t tp) {
    return all_reduce_copy(x, *reinterpret_cast<Communicator*>(tp));
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], torch::Tensor()}; }
};

struct GatherSeq : torch::autograd::Function<GatherSeq> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return all_gather_seq(x, *reinterpret_cast<Communicator*>(tp));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {reduce_scatter_seq(g[0], comm_of(ctx)), torch::Tensor()};
  }
};

struct ReduceScatterSeq : torch::autograd::Function<ReduceScatterSeq> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    // Op-level activation checkpointing keeps the reduce-scatter's output (as TorchTitan's
    // policy does): the recompute then issues no collective here, on every rank alike.
    const OpSaveAction act = op_save_next(SavedOp::kReduceScatter);
    if (act == OpSaveAction::kReuse) return op_save_take(SavedOp::kReduceScatter)[0];
    auto out = reduce_scatter_seq(x, *reinterpret_cast<Communicator*>(tp));
    if (act == OpSaveAction::kKeep) op_save_keep(SavedOp::kReduceScatter, {out});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_gather_seq(g[0], comm_of(ctx)), torch::Tensor()};
  }
};

struct GatherLast : torch::autograd::Function<GatherLast> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    ctx->saved_data["local"] = x.size(-1);
    return all_gather_last(x, *reinterpret_cast<Communicator*>(tp));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const int64_t local = ctx->saved_data["local"].toInt();
    return {g[0].narrow(-1, comm_of(ctx).rank() * local, local).contiguous(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor copy_to_tp(const torch::Tensor& x, Communicator& tp) {
  return tp.size() > 1 ? CopyToTp::apply(x, handle(tp)) : x;
}
torch::Tensor reduce_from_tp(const torch::Tensor& x, Communicator& tp) {
  return tp.size() > 1 ? ReduceFromTp::apply(x, handle(tp)) : x;
}
torch::Tensor gather_sequence(const torch::Tensor& x, Communicator& tp) {
  return tp.size() > 1 ? GatherSeq::apply(x, handle(tp)) : x;
}
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, Communicator& tp) {
  return tp.size() > 1 ? ReduceScatterSeq::apply(x, handle(tp)) : x;
}
torch::Tensor gather_last_dim(const torch::Tensor& x, Communicator& tp) {
  return tp.size() > 1 ? GatherLast::apply(x, handle(tp)) : x;
}

void shard_weight(WeightModule& m, int64_t dim, Communicator& tp, int64_t replicas) {
  torch::NoGradGuard no_grad;
  const int64_t n = m.weight.size(dim);
  TITAN_CHECK(replicas >= 1 && tp.size() % replicas == 0, "tensor parallel: ", replicas,
              " replicas do not divide the tensor-parallel degree ", tp.size());
  const int64_t blocks = tp.size() / replicas;
  TITAN_CHECK(n % blocks == 0, "tensor parallel: dim ", dim, " of size ", n, " is not divisible into ", blocks,
              " blocks (tensor-parallel degree ", tp.size(), ", ", replicas, " replicas)");
  const int64_t len = n / blocks;
  // set_data keeps the registered parameter object, now holding this rank's block.
  m.weight.set_data(m.weight.narrow(dim, (tp.rank() / replicas) * len, len).contiguous().clone());
}

torch::Tensor gather_tp_blocks(const torch::Tensor& local, int64_t dim, int64_t replicas, Communicator& tp) {
  torch::Tensor all = all_gather_along(local, dim, tp);
  if (replicas == 1) return all.contiguous();
  std::vector<torch::Tensor> firsts;
  const auto blocks = all.chunk(tp.size(), dim);
  for (int64_t b = 0; b < tp.size(); b += replicas) firsts.push_back(blocks[b]);
  return torch::cat(firsts, dim).contiguous();
}

void sum_over_replicas(const std::vector<torch::Tensor>& grads, int64_t replicas, Communicator& tp) {
  if (replicas == 1 || grads.empty()) return;
  torch::NoGradGuard no_grad;
  const int64_t groups = tp.size() / replicas, mine = tp.rank() / replicas;
  // Each rank's gradient goes to its block's slot, zeros elsewhere: the sum over tp gives
  // every slot the sum over that block's replicas.
  std::vector<torch::Tensor> slots;
  for (const auto& g : grads) {
    auto s = torch::zeros({groups, g.numel()}, g.options());
    s[mine].copy_(g.reshape({-1}));
    slots.push_back(s);
  }
  tp.all_reduce(slots, ReduceOp::kSum)->wait();
  for (size_t i = 0; i < grads.size(); ++i) grads[i].copy_(slots[i][mine].view_as(grads[i]));
}

torch::Tensor vocab_parallel_embedding_partial(const torch::Tensor& local_weight,
                                               const torch::Tensor& ids, Communicator& tp) {
  const int64_t local = local_weight.size(0), start = tp.rank() * local;
  auto outside = (ids < start) | (ids >= start + local);  // `|`: logical_or has no meta kernel in 1.13
  auto local_ids = (ids - start).masked_fill(outside, 0);
  auto rows = local_weight.index({local_ids});
  return rows.masked_fill(outside.unsqueeze(-1), 0.0);
}

torch::Tensor vocab_parallel_cross_entropy_sum(const torch::Tensor& local_logits,
                                               const torch::Tensor& labels, double normalizer,
                                               Communicator& tp) {
  auto logits = local_logits.reshape({-1, local_logits.size(-1)}).to(torch::kFloat32);
  auto flat_labels = labels.reshape({-1});
  const int64_t local = logits.size(1), start = tp.rank() * local;
  // The max only stabilizes the exponentials; softmax does not depend on it, so no gradient.
  auto max = std::get<0>(logits.detach().max(-1));
  if (tp.size() > 1) tp.all_reduce(max, ReduceOp::kMax)->wait();
  auto shifted = logits - max.unsqueeze(1);
  auto sum_exp = reduce_from_tp(shifted.exp().sum(-1), tp);
  auto outside = (flat_labels < start) | (flat_labels >= start + local);
  auto local_labels = (flat_labels - start).masked_fill(outside, 0);
  auto target = shifted.gather(1, local_labels.unsqueeze(1)).squeeze(1).masked_fill(outside, 0.0);
  target = reduce_from_tp(target, tp);
  return (sum_exp.log() - target).sum() / normalizer;
}

}  // namespace titan
