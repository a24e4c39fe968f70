#include "trainer/step/parallelize.h"

#include <algorithm>

#include "common/error.h"
#include "parallel/activation_checkpoint.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"
#include "trainer/model/moe.h"
#include "trainer/step/expert_plan.h"
#include "trainer/step/moe_tensor_plan.h"
#include "trainer/step/pipeline_model.h"

namespace titan {
torch::ScalarType scalar_type(Dtype d) {
  switch (d) {
    case Dtype::kBFloat16: return torch::kBFloat16;
    case Dtype::kFloat16: return torch::kFloat16;
    case Dtype::kFloat32: break;
  }
  return torch::kFloat32;
}

namespace {

std::vector<NamedModule> weight_modules_under(torch::nn::Module& parent, const std::string& prefix) {
  std::vector<NamedModule> out;
  for (auto& item : parent.named_modules(prefix, /*include_self=*/false)) {
    if (auto w = std::dynamic_pointer_cast<WeightModule>(item.value())) out.push_back({item.key(), w});
  }
  return out;
}

}  // namespace

// FSDP's head unit: final norm and output; with tied weights the embedding joins it.
std::vector<NamedModule> head_modules(Transformer& model) {
  std::vector<NamedModule> head = {{"norm", model->norm.ptr()}};
  if (model->output) {
    head.push_back({"output", model->output.ptr()});
  } else {
    head.insert(head.begin(), {"tok_embeddings", model->tok_embeddings.ptr()});
  }
  return head;
}

// `outer` around whatever wrap the module already has (TP's, applied first).
void wrap_outside(WeightModule& m, WrapFn outer) {
  WrapFn inner_wrap = m.wrap;
  m.wrap = [outer, inner_wrap](const torch::Tensor& x, const ForwardFn& fn) {
    return outer(x, [&](const torch::Tensor& y) { return apply_wrap(inner_wrap, y, fn); });
  };
}

std::vector<std::vector<NamedModule>> block_modules(Transformer& model) {
  std::vector<std::vector<NamedModule>> blocks;
  for (size_t i = 0; i < model->layers.size(); ++i) {
    blocks.push_back(weight_modules_under(*model->layers[i], "layers." + std::to_string(i)));
  }
  return blocks;
}

void check_tensor_parallel(const ModelArgs& a, int64_t tp, int64_t seq_len, bool sequence_parallel) {
  if (tp == 1) return;
  auto need = [&](int64_t value, const char* what, const char* hint) {
    TITAN_CONFIG_CHECK(value % tp == 0, "parallelism.tensor_parallel_degree (", tp, ") must divide ",
                       what, " (", value, ")", hint);
  };
  need(a.n_heads, "model.n_heads", "");
  // KV heads split over tp, or, with more tp ranks than KV heads, each replicated on
  // tp / n_kv_heads ranks (those ranks' query heads all belong to that head's group).
  TITAN_CONFIG_CHECK(a.n_kv_heads % tp == 0 || tp % a.n_kv_heads == 0, "parallelism.tensor_parallel_degree (", tp,
                     ") must divide model.n_kv_heads (", a.n_kv_heads, ") or be a multiple of it (KV heads are then "
                     "replicated)");
  if (a.moe_layers() < a.n_layers) need(a.ffn_dim, "model.ffn_dim", "");  // dense MLPs split; MoE blocks do not
  // The vocabulary is not padded silently (that would change the model): pad it yourself
  // with model.vocab_size, a size that tokenizers never emit past.
  need(a.vocab_size, "model.vocab_size",
       "; set --model.vocab_size to the next multiple of the degree to pad the vocabulary");
  if (sequence_parallel) need(seq_len, "training.seq_len (sequence parallel)", "");
}

namespace {

// The TP plan for a Qwen3 / Llama 3 model (TorchTitan's plan): q/k/v and gate/up
// column-wise, attention output and down row-wise, embedding and output on the vocabulary;
// with sequence parallel the norms and the residual stream hold a sequence shard.
void apply_tensor_parallel(Transformer& model, Communicator& tp, bool sp, bool loss_parallel, bool fused,
                           bool expert_tp, ParallelizedModel& out) {
  auto shard = [&](WeightModule& m, int64_t dim, int64_t replicas = 1) {
    shard_weight(m, dim, tp, replicas);
    out.tp_sharded.push_back(m.weight);
    out.tp_shard_dims.push_back(dim);
    out.tp_shard_replicas.push_back(replicas);
  };
  auto col = [&](Linear& l) { shard(*l, 0); };
  auto row = [&](Linear& l) {
    shard(*l, 1);
    l->wrap = [&tp, sp](const torch::Tensor& x, const ForwardFn& inner) {
      return sp ? reduce_scatter_sequence(inner(x), tp) : reduce_from_tp(inner(x), tp);
    };
  };
  // A norm whose output feeds column-parallel layers: gather the sequence (SP) or mark the
  // point where their input gradients are summed (no SP).
  auto before_columns = [&](RMSNorm& n) {
    n->wrap = [&tp, sp](const torch::Tensor& x, const ForwardFn& inner) {
      return sp ? gather_sequence(inner(x), tp) : copy_to_tp(inner(x), tp);
    };
    if (sp) out.tp_partial_grads.push_back(n->weight);
  };
  const int64_t n_kv = model->args.n_kv_heads;
  const int64_t kv_replicas = tp.size() > n_kv ? tp.size() / n_kv : 1;
  for (auto& block : model->layers) {
    auto& attn = block->attention;
    col(attn->wq), row(attn->wo);
    shard(*attn->wk, 0, kv_replicas), shard(*attn->wv, 0, kv_replicas);
    if (attn->q_norm) {
      out.tp_partial_grads.push_back(attn->q_norm->weight);
      out.tp_partial_grads.push_back(attn->k_norm->weight);
    }
    before_columns(block->attention_norm);
    if (block->moe) {
      // Experts whole per tp rank (expert TP 1) or sharded over tp (trainer/step/moe_tensor_plan.h).
      apply_moe_tensor_parallel(*block, tp, sp, expert_tp, out);
      continue;
    }
    auto& ff = block->feed_forward;
    col(ff->w1);
    if (ff->w3) col(ff->w3);  // SwiGLU's up projection; a non-gated MLP has none
    row(ff->w2);
    before_columns(block->ffn_norm);
  }
  auto& emb = model->tok_embeddings;
  shard(*emb, 0);
  emb->wrap = [&tp, sp, raw = emb.get()](const torch::Tensor& ids, const ForwardFn&) {
    auto partial = vocab_parallel_embedding_partial(raw->weight, ids, tp);
    return sp ? reduce_scatter_sequence(partial, tp) : reduce_from_tp(partial, tp);
  };
  before_columns(model->norm);
  if (model->output) {
    shard(*model->output, 0);
  }
  // Tied: head() multiplies by the (vocabulary-sharded) embedding weight, column-wise too.
  if (loss_parallel) {
    out.loss = [&tp](const torch::Tensor& logits, const torch::Tensor& labels, double normalizer) {
      return vocab_parallel_cross_entropy_sum(logits, labels, normalizer, tp);
    };
  } else {
    out.loss = [&tp, fused](const torch::Tensor& logits, const torch::Tensor& labels, double normalizer) {
      return cross_entropy_sum(gather_last_dim(logits, tp), labels, normalizer, fused);
    };
  }
}

}  // namespace

// Context parallel (parallel/context_parallel.h): every block's attention runs as ring attention
// over cp, and the RoPE tables hold the positions of this rank's two chunks of the sequence.
void apply_context_parallel(Transformer& model, Communicator& cp, const JobConfig& cfg) {
  const CpRotate method = parse_cp_rotate(cfg.parallelism.context_parallel_rotate_method);
  if (cp.size() == 1) return;
  check_context_parallel(cfg.training.seq_len, cp.size());
  for (size_t i = 0; i < model->layers.size(); ++i) {
    auto& block = model->layers[i];
    TITAN_CONFIG_CHECK(block && block->attention && !block->attention->attention_fn,
                       "parallelism.context_parallel_degree (", cp.size(), "): layer ", i,
                       " has no causal attention that ring attention can split over the sequence");
    block->attention->attention_fn = ring_attention_fn(cp, method);
  }
  model->rope = {cp_shard_sequence(model->rope.cos, 0, cp.size(), cp.rank()),
                 cp_shard_sequence(model->rope.sin, 0, cp.size(), cp.rank())};
}

bool applies_fsdp(const DeviceMesh& mesh) { return mesh.size("fsdp") > 1 || mesh.size("dp_replicate") > 1; }

FsdpOptions::Reshard fsdp_reshard_policy(const JobConfig& cfg, bool pipeline) {
  switch (cfg.parallelism.fsdp_reshard_after_forward) {
    case ReshardPolicy::kAlways: return FsdpOptions::Reshard::kAlways;
    case ReshardPolicy::kNever: return FsdpOptions::Reshard::kNever;
    case ReshardPolicy::kDefault: break;
  }
  return pipeline ? FsdpOptions::Reshard::kNever : FsdpOptions::Reshard::kDefault;
}

namespace {

// The linear products of the model's blocks (all alike), for a remat policy to name them: the
// number of Linear children of a block's attention and MLP (they run q, k, v, out; inputs, output).
BlockProducts block_products(const Transformer& model) {
  BlockProducts p;
  for (const auto& block : model->layers) {
    if (!block) continue;
    auto linears = [](const torch::nn::Module& m) {
      int64_t n = 0;
      for (const auto& c : m.children()) n += c->as<LinearImpl>() != nullptr ? 1 : 0;
      return n;
    };
    p.attention_linears = linears(*block->attention);
    p.mlp_linears = block->feed_forward ? linears(*block->feed_forward) : 0;  // an MoE block's experts are no Linear
    break;
  }
  return p;
}

}  // namespace

ParallelizedModel parallelize(Transformer& model, DeviceMesh& mesh, const JobConfig& cfg, PipelineModel* pipeline) {
  ParallelizedModel out;
  const bool fused = cfg.training.fused_kernels;
  out.loss = [fused](const torch::Tensor& logits, const torch::Tensor& labels, double normalizer) {
    return cross_entropy_sum(logits, labels, normalizer, fused);
  };
  const int64_t tp = mesh.size("tp");
  const bool sp = tp > 1 && cfg.parallelism.enable_sequence_parallel;
  // Sequence parallel splits what context parallel left of the sequence.
  check_tensor_parallel(model->args, tp, cfg.training.seq_len / mesh.size("cp"), sp);
  apply_context_parallel(model, *mesh["cp"], cfg);
  // TP first: FSDP then shards each rank's TP block further (2D: dp_shard x tp).
  check_expert_tensor_parallel_config(cfg, model->args);
  const bool expert_tp = experts_tensor_parallel(cfg);
  if (tp > 1)
    apply_tensor_parallel(model, *mesh["tp"], sp, !cfg.parallelism.disable_loss_parallel, fused, expert_tp, out);
  if (pipeline) pipeline->apply(model, out);  // PP split after TP, before FSDP
  // Expert parallelism before FSDP too: FSDP shards each rank's slice of experts over efsdp.
  check_expert_parallel_config(cfg, model->args, mesh);
  const bool ep = cfg.parallelism.expert_parallel_degree > 1;
  if (ep) {
    ExpertGroups groups = build_expert_groups(mesh, cfg.parallelism.expert_parallel_degree);
    out.ep = groups.ep;
    out.efsdp = groups.efsdp;
    apply_expert_parallel(model, out.ep);
  }
  // Routed-token counts: every data rank sees other tokens, and so does each tp rank under SP
  // (unless the experts are sharded over tp: every tp rank then routes the whole sequence).
  std::vector<std::shared_ptr<Communicator>> load_groups = {mesh["loss"]};
  if (sp && !expert_tp) load_groups.push_back(mesh["tp"]);
  sum_expert_load_over(model, load_groups);
  // Activation checkpointing goes inside FSDP (installed first, so it is the inner wrapper):
  // the recomputed forward then runs on parameters FSDP has gathered again.
  const AcMode ac = cfg.activation_checkpoint.mode;
  if (ac == AcMode::kPolicy) {
    const auto& a = cfg.activation_checkpoint;
    model->block_wrappers.push_back(
        policy_activation_checkpoint_wrapper(remat_policy(a.policy, a.save_on_device, a.offload_to_host), block_products(model)));
  } else if (cfg.activation_checkpoint.op_level()) {
    model->block_wrappers.push_back(op_activation_checkpoint_wrapper());
  } else if (ac != AcMode::kNone) {
    model->block_wrappers.push_back(
        activation_checkpoint_wrapper(ac == AcMode::kFull ? 1 : cfg.activation_checkpoint.every()));
  }
  if (applies_fsdp(mesh)) {
    FsdpOptions o;
    o.reshard_after_forward = fsdp_reshard_policy(cfg, pipeline != nullptr);
    o.param_dtype = scalar_type(cfg.training.mixed_precision_param);
    o.reduce_dtype = scalar_type(cfg.training.mixed_precision_reduce);
    const bool has_embedding = !pipeline || pipeline->runs_embedding();
    const bool has_head = !pipeline || pipeline->runs_output();
    // Tied weights join the head unit where one rank runs both the embedding and the head.
    // Under PP with the two on different ranks, each rank's copy is an ordinary unit of its
    // own: the embedding unit on the first stage, the head unit (embedding + final norm) on
    // the last, sharded alike over the same fsdp group, so their gradient shards can be summed
    // (PipelineModel::sum_tied_gradients).
    const bool tied = !model->output && has_embedding && has_head;
    if (tied && pipeline) pipeline->root_wraps_embedding = true;
    std::vector<NamedModule> embedding;
    if (!tied && has_embedding) embedding.push_back({"tok_embeddings", model->tok_embeddings.ptr()});
    auto blocks = pipeline ? pipeline->block_modules(model) : block_modules(model);
    if (ep) {
      for (auto& b : blocks) b.erase(std::remove_if(b.begin(), b.end(), [](const NamedModule& m) {
                                       return is_expert_module(m.name);
                                     }), b.end());
    }
    out.fsdp = std::make_unique<Fsdp>(mesh["fsdp"], mesh["dp_replicate"], o, embedding, std::move(blocks),
                                      has_head ? head_modules(model) : std::vector<NamedModule>{}, tied);
    if (ep) {
      auto experts = expert_modules(model);
      if (pipeline) {  // this rank's blocks only, in the order of its block units
        std::vector<std::vector<NamedModule>> local;
        for (size_t i = 0; i < experts.size(); ++i)
          if (pipeline->holds_layer(static_cast<int64_t>(i))) local.push_back(std::move(experts[i]));
        experts = std::move(local);
      }
      out.fsdp->add_expert_units(out.efsdp, std::move(experts));
    }
    model->forward_wrap = out.fsdp->root_wrapper();
    if (!tied) {
      if (has_embedding) wrap_outside(*model->tok_embeddings, out.fsdp->embedding_wrapper());
      if (has_head) wrap_outside(*model->norm, out.fsdp->head_wrapper());
    }
    model->block_wrappers.insert(model->block_wrappers.begin(),
                                 pipeline ? pipeline->local_block_wrapper(out.fsdp->block_wrapper())
                                          : out.fsdp->block_wrapper());
  }
  return out;
}

}  // namespace titan
