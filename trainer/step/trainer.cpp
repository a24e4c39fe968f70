#include "trainer/step/trainer.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "common/error.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"
#include "trainer/step/memory_limits.h"
#include "trainer/config/resolve_model.h"
#include "trainer/model/moe.h"
#include "trainer/step/param_layout.h"
#include "trainer/step/rank_agreement.h"

namespace titan {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// Sums a host scalar over a group. On the meta device the value is unknown (0) but the
// collective is still issued, as the simulator must see it.
double all_reduce_sum(Communicator& group, double v) {
  auto t = torch::tensor({v}, torch::kFloat64);
  group.all_reduce(t, ReduceOp::kSum)->wait();
  return t.item<double>();
}

// A training step frees and allocates the same activation sizes every step. glibc gives
// freed chunks above its (adaptive) mmap threshold and a freed heap top back to the kernel,
// and the next step pays a page fault and a zeroed page per 4 KiB for them again (~36K
// faults, 10% of a step on the 0.6B-shaped slice). Kept in the heap, they are reused.
void keep_freed_memory_in_process() {
#ifdef __GLIBC__
  static const bool once = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest: bigger blocks still map
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    return true;
  }();
  (void)once;
#endif
}

int ranks_on_this_host() {
  return std::max(1, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_int("TITAN_LOCAL_WORLD_SIZE", 1)));
}

}  // namespace

int choose_threads(const JobConfig& cfg) {
  if (cfg.training.threads > 0) return static_cast<int>(cfg.training.threads);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / ranks_on_this_host());
}

int64_t vocab_without_data(const JobConfig& cfg) {
  ModelArgs a = model_flavor(to_string(cfg.model.name), cfg.model.flavor);
  if (a.vocab_size > 0 || cfg.model.vocab_size > 0) return 0;
  return make_tokenizer(cfg.model.tokenizer_path)->vocab_size();
}

JobConfig with_resolved_model(const JobConfig& cfg) {
  const ModelArgs a = resolve_model_args(cfg, vocab_without_data(cfg));
  JobConfig out = cfg;
  ModelSection& m = out.model;
  m.dim = a.dim, m.n_layers = a.n_layers, m.n_heads = a.n_heads, m.n_kv_heads = a.n_kv_heads;
  m.head_dim = a.head_dim, m.ffn_dim = a.ffn_dim, m.vocab_size = a.vocab_size;
  m.rope_theta = a.rope_theta, m.norm_eps = a.norm_eps;
  m.moe_experts = a.moe_experts, m.moe_top_k = a.moe_top_k, m.moe_ffn_dim = a.moe_ffn_dim;
  m.moe_shared_ffn_dim = a.moe_shared_ffn_dim, m.moe_sparse_step = a.moe_sparse_step;
  m.moe_aux_loss_coeff = a.moe_aux_loss_coeff;
  m.tie_embeddings = a.tie_embeddings ? FlavorBool::kTrue : FlavorBool::kFalse;
  m.qk_norm = a.qk_norm ? FlavorBool::kTrue : FlavorBool::kFalse;
  return out;
}

CommOptions comm_options(const JobConfig& cfg) {
  CommOptions o;
  o.backend = to_string(cfg.comm.backend);
  o.collective_mode = cfg.comm.collective_mode;
  o.bucket_cap_mb = cfg.comm.bucket_cap_mb;
  o.init_timeout_seconds = cfg.comm.init_timeout_seconds;
  o.train_timeout_seconds = cfg.comm.train_timeout_seconds;
  o.rendezvous_dir = cfg.comm.rendezvous_dir;
  return o;
}

ParallelDims parallel_dims(const JobConfig& cfg, int64_t world_size) {
  ParallelDims d;
  d.dp_replicate = cfg.parallelism.data_parallel_replicate_degree;
  d.dp_shard = cfg.parallelism.data_parallel_shard_degree;
  d.cp = cfg.parallelism.context_parallel_degree;
  d.tp = cfg.parallelism.tensor_parallel_degree;
  d.pp = cfg.parallelism.pipeline_parallel_degree;
  d.world_size = world_size;
  d.validate();
  return d;
}

Trainer::Trainer(const JobConfig& cfg, std::shared_ptr<World> world, bool on_meta)
    : cfg_(cfg), world_(std::move(world)), on_meta_(on_meta) {
  // torch::set_num_threads rebuilds libtorch's pthreadpool (a new worker that spins for
  // milliseconds) even at the current count. On the meta device (the simulator's recordings)
  // nothing is computed, so the count is left alone: it is process-wide and outlives this
  // Trainer, and a recording that set it (libtorch defaults to the physical cores, 1 on a
  // 2-thread host; choose_threads counts hardware threads) changed the reduction order of
  // every later CPU op in the process (tests/trainer/simulate_test.cpp).
  if (const int threads = choose_threads(cfg_); !on_meta_ && at::get_num_threads() != threads)
    torch::set_num_threads(threads);
  // The seed and the deterministic-algorithms flag are process-wide too, and a recording
  // neither draws random numbers (no weights are initialised on meta) nor computes: it leaves
  // them as it found them, so that simulating between CPU runs in one process (tests, studies)
  // does not reseed or slow the next (tests/trainer/simulate_test.cpp).
  if (!on_meta_) {
    keep_freed_memory_in_process();
    if (cfg_.training.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
    torch::manual_seed(cfg_.training.seed);
  }
  if (!world_) world_ = init_distributed(comm_options(cfg_));
  dims_ = parallel_dims(cfg_, world_->size());
  check_context_parallel(cfg_.training.seq_len, dims_.cp);

  std::shared_ptr<const std::vector<int64_t>> tokens;
  if (on_meta_) {
    args_ = resolve_model_args(cfg_, vocab_without_data(cfg_));
  } else {
    tokenizer_ = make_tokenizer(cfg_.model.tokenizer_path);
    const std::string data_path =
        cfg_.training.dataset_path.empty() ? default_corpus_path() : cfg_.training.dataset_path;
    tokens = std::make_shared<const std::vector<int64_t>>(tokenize_file(*tokenizer_, data_path));
    args_ = resolve_model_args(cfg_, tokenizer_->vocab_size());
    if (args_.vocab_size != tokenizer_->vocab_size() && cfg_.model.vocab_size == 0 && is_writer()) {
      std::printf("titan: model.vocab_size padded from %lld (the tokenizer's) to %lld, a multiple of %lld "
                  "(model.vocab_size_divisible_by x tensor_parallel_degree)\n",
                  static_cast<long long>(tokenizer_->vocab_size()), static_cast<long long>(args_.vocab_size),
                  static_cast<long long>(cfg_.model.vocab_size_divisible_by * dims_.tp));
    }
  }
  // Before the mesh's groups and every later collective, whose sizes follow the config.
  if (!on_meta_ && world_->size() > 1) check_ranks_agree(cfg_, args_.vocab_size, *world_->comm());
  mesh_ = ParallelDims(dims_).build_mesh(world_);
  // Under FSDP / HSDP / DDP the stored parameters, gradients and optimizer state are in
  // training.master_dtype (fp32 by default) and mixed_precision_param is the dtype FSDP
  // gathers and computes in (FSDP2's mixed precision policy); without those plans the model
  // is built in that dtype itself.
  const bool fp32_masters = applies_fsdp(*mesh_);
  std::optional<PipelinePlan> plan;
  if (dims_.pp > 1) plan = plan_pipeline(cfg_, args_, dims_.pp, fp32_masters);
  // Refused before the model or a batch is allocated, instead of an OOM kill mid-step.
  if (!on_meta_) {
    const int pp_rank = dims_.pp > 1 ? static_cast<int>(mesh_->coordinate("pp")) : 0;
    check_fits_in_memory(cfg_, dims_, args_, pp_rank, ranks_on_this_host(), machine_memory_bytes(),
                         plan ? &*plan : nullptr);
  }
  auto opts = torch::TensorOptions().dtype(
      fp32_masters ? scalar_type(cfg_.training.master_dtype) : scalar_type(cfg_.training.mixed_precision_param));
  model_ = Transformer(args_, cfg_.training.seq_len, on_meta_ ? opts.device(torch::kMeta) : opts);
  model_->set_fused_kernels(FusedKernels::all(cfg_.training.fused_kernels));
  // Full weights from the seed on every rank, then sharded: any mesh starts alike.
  if (!on_meta_) model_->init_weights(static_cast<uint64_t>(cfg_.training.seed));
  if (plan) pipeline_ = std::make_unique<PipelineModel>(cfg_, args_, *mesh_, std::move(*plan), on_meta_);
  parallel_ = parallelize(model_, *mesh_, cfg_, pipeline_.get());
  tp_grads_ = TpGradientPlan(parallel_);

  const int64_t dp = mesh_->size("dp");
  const int64_t local_bs = cfg_.training.local_batch_size;
  global_batch_ = cfg_.training.global_batch_size > 0 ? cfg_.training.global_batch_size : local_bs * dp;
  TITAN_CONFIG_CHECK(global_batch_ % (local_bs * dp) == 0, "training.global_batch_size (", global_batch_,
                     ") must be a multiple of local_batch_size x data-parallel degree (", local_bs, " x ",
                     dp, ")");
  if (args_.is_moe()) {
    set_moe_aux_normalizer(model_, static_cast<double>(tokens_per_step()));
    if (on_meta_) set_meta_routing(model_, {meta_routing_kind(cfg_.simulation.moe_routing), cfg_.simulation.moe_routing_zipf});
  }
  if (!on_meta_) {
    loader_ = std::make_unique<DataLoader>(tokens, cfg_.training.seq_len, global_batch_,
                                           mesh_->coordinate("dp"), dp);
  }

  for (auto& p : model_->named_parameters()) {
    if (!pipeline_ || pipeline_->holds(p.key())) params_.push_back({p.key(), p.value()});  // PP: this rank's stages
  }
  optimizer_ = std::make_unique<AdamW>(params_, cfg_.optimizer);
}

// The embedding parameter as registered (what the optimizer steps; FSDP's shard), not the
// module's `weight` member, which a plan may point at a gathered tensor.
torch::Tensor Trainer::registered_embedding() const {
  return model_->tok_embeddings->named_parameters(/*recurse=*/false)["weight"];
}

double Trainer::global_grad_sq_norm() {
  // Parameters sharded over tp: their squares add over tp (a block held by several ranks
  // counts once); replicated ones count once. Then FSDP shards add over the fsdp group; dp
  // replicas hold equal copies; pipeline stages hold disjoint parameters, but for the last
  // stage's copy of a tied embedding, which is left out (the first stage counts it).
  const torch::Tensor embedding = registered_embedding();
  const torch::Tensor* copy = pipeline_ && pipeline_->tied_copy() ? &embedding : nullptr;
  const TpGradientPlan::NormShare tp = tp_grads_.norm_share(copy);
  double all = optimizer_->grad_sq_norm();
  // The copy's square stays in tp.here (under TP) or is taken out here (without).
  if (copy && copy->grad().defined() && !tp_grads_.shards(*copy)) all -= squared_sum(copy->grad());
  const double replicated = all - tp.here;
  const double over_tp = all_reduce_sum(*(*mesh_)["tp"], tp.sharded) + replicated;
  const double over_fsdp = all_reduce_sum(*(*mesh_)["fsdp"], over_tp);
  return pipeline_ ? all_reduce_sum(*(*mesh_)["pp"], over_fsdp) : over_fsdp;
}

int64_t Trainer::tp_shard_dim(const std::string& name) const {
  return tp_grads_.shard_dim(model_->named_parameters()[name].unsafeGetTensorImpl());
}

int64_t Trainer::tp_shard_replicas(const std::string& name) const {
  return tp_grads_.shard_replicas(model_->named_parameters()[name].unsafeGetTensorImpl());
}

std::map<std::string, torch::Tensor> Trainer::gather_full_parameters() {
  const auto layout = param_layout(*this);
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < layout.size(); ++i) out[layout[i].name] = full_parameter(*this, i, layout[i]);
  if (!pipeline_) return out;
  // Other stages' parameters: from the pipeline rank holding them (every rank, same order).
  Transformer shapes(args_, 1, torch::TensorOptions().device(torch::kMeta));
  for (auto& p : shapes->named_parameters()) {
    auto it = out.find(p.key());
    if (it == out.end()) {
      const auto dtype = params_.empty() ? torch::kFloat32 : params_.front().param.scalar_type();
      it = out.emplace(p.key(), torch::empty(p.value().sizes(), torch::TensorOptions().dtype(dtype))).first;
    }
    (*mesh_)["pp"]->broadcast(it->second, pipeline_->owner(p.key()))->wait();
  }
  return out;
}

int64_t Trainer::param_bytes() const {
  int64_t b = 0;
  for (auto& p : params_) b += p.param.nbytes();
  return b;
}

int64_t Trainer::microbatches() const {
  const int64_t chunks = global_batch_ / (cfg_.training.local_batch_size * mesh_->size("dp"));
  return pipeline_ ? chunks * pipeline_->microbatches() : chunks;
}

double Trainer::pipeline_step(const torch::Tensor& inputs, const torch::Tensor& labels, double normalizer,
                              bool reduce) {
  Fsdp* fsdp = parallel_.fsdp.get();
  auto loss_fn = [&](const torch::Tensor& logits, const torch::Tensor& lab) {
    return parallel_.loss(logits, lab, normalizer);
  };
  // Each backward action ends with FSDP's final callback; with sync off it only accumulates.
  // REDUCE_GRAD then reduces what every micro-batch accumulated, once.
  if (fsdp) {
    fsdp->reshard_all();  // nothing gathered before the step (an eval forward) is reused in it
    fsdp->set_requires_gradient_sync(false);
    fsdp->set_reshard_after_backward(false);
  }
  auto reduce_grad = [fsdp, reduce] {
    if (!fsdp || !reduce) return;
    fsdp->set_requires_gradient_sync(true);
    fsdp->finish_backward();
  };
  torch::Tensor loss = pipeline_->run(model_, inputs, labels, loss_fn, fsdp ? fsdp->root_wrapper() : WrapFn(),
                                      reduce_grad);
  if (fsdp) {
    fsdp->set_reshard_after_backward(true);
    fsdp->reshard_all();
  }
  return loss.defined() && !on_meta_ ? loss.item<double>() : 0.0;
}

Batch Trainer::next_batch() {
  if (loader_) return loader_->next();
  const int64_t rows = global_batch_ / mesh_->size("dp");
  auto meta = torch::TensorOptions().device(torch::kMeta).dtype(torch::kInt64);
  return {torch::empty({rows, cfg_.training.seq_len}, meta), torch::empty({rows, cfg_.training.seq_len}, meta)};
}

Trainer::StepResult Trainer::train_step() {
  auto t0 = std::chrono::steady_clock::now();
  const int64_t local_bs = cfg_.training.local_batch_size;
  const double normalizer = static_cast<double>(tokens_per_step());
  Batch batch = next_batch();
  optimizer_->zero_grad();
  StepResult r;
  const int64_t micro = batch.inputs.size(0) / local_bs;
  // Context parallel: this rank's two load-balanced chunks of every sequence.
  const int64_t cp = mesh_->size("cp"), cp_rank = mesh_->coordinate("cp");
  for (int64_t m = 0; m < micro; ++m) {
    auto in = cp_shard_sequence(batch.inputs.narrow(0, m * local_bs, local_bs), 1, cp, cp_rank);
    auto lab = cp_shard_sequence(batch.labels.narrow(0, m * local_bs, local_bs), 1, cp, cp_rank);
    if (pipeline_) {
      r.loss += pipeline_step(in, lab, normalizer, !cfg_.parallelism.fsdp_defer_gradient_sync || m + 1 == micro);
      continue;
    }
    // FSDP reduces gradients at the end of each backward (its final callback); deferred,
    // only the last micro-batch's backward reduces what all of them accumulated.
    if (parallel_.fsdp) {
      parallel_.fsdp->set_requires_gradient_sync(!cfg_.parallelism.fsdp_defer_gradient_sync || m + 1 == micro);
    }
    auto loss = parallel_.loss(model_->forward(in), lab, normalizer);
    loss.backward();
    if (!on_meta_) r.loss += loss.item<double>();
  }
  tp_grads_.finish(*(*mesh_)["tp"], parallel_.fsdp.get());
  // Tied embeddings under PP: the first and last stages' copies add their gradients (each
  // the full data-parallel sum by now, FSDP's a shard of it), then clip and step alike.
  if (pipeline_ && args_.tie_embeddings)
    pipeline_->sum_tied_gradients(registered_embedding(), parallel_.fsdp.get());
  // Tensor-parallel peers see the same tokens, so the loss is summed over dp only (and over
  // pp, where only the last stage has it); context-parallel ranks each hold a part of every
  // sequence's token sum (over the global batch's tokens), so over cp too.
  if (pipeline_) r.loss = all_reduce_sum(*(*mesh_)["pp"], r.loss);
  r.loss = all_reduce_sum(*(*mesh_)[cp > 1 ? "loss" : "dp"], r.loss);
  r.grad_norm = std::sqrt(global_grad_sq_norm());
  r.lr = cfg_.optimizer.lr * lr_factor(cfg_.lr_scheduler, cfg_.training.steps, step_);
  if (!skip_nonfinite(r)) {
    // Clipping rides in the optimizer's one pass over the flat buffers.
    optimizer_->step(r.lr, clip_coefficient(r.grad_norm, cfg_.training.max_norm));
    update_expert_bias(model_);  // MoE aux-loss-free balancing (a no-op otherwise)
    check_finite_parameters();
  } else {
    reset_expert_load(model_);
  }
  ++step_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// The loss and gradient norm are global (all-reduced), so every rank takes the same decision
// without another collective.
bool Trainer::skip_nonfinite(StepResult& r) {
  if (on_meta_ || (std::isfinite(r.loss) && std::isfinite(r.grad_norm))) return false;
  TITAN_CHECK(cfg_.training.skip_nonfinite_steps, "step ", step_ + 1, ": loss ", r.loss, ", gradient norm ",
              r.grad_norm, " is not finite; stopping before the optimizer step, so weights and checkpoints "
              "stay finite (lower optimizer.lr, or set training.skip_nonfinite_steps = true to skip such steps)");
  r.skipped = true;
  ++skipped_steps_;
  optimizer_->zero_grad();
  if (is_writer()) {
    std::printf("titan: step %lld: loss %g, gradient norm %g: optimizer step skipped (%lld skipped so far)\n",
                static_cast<long long>(step_ + 1), r.loss, r.grad_norm, static_cast<long long>(skipped_steps_));
  }
  return true;
}

// An update can overflow even from finite gradients (a huge lr); a step cannot be undone, so
// the job stops before such weights reach a checkpoint. Local: a failing rank ends the job.
void Trainer::check_finite_parameters() const {
  if (on_meta_) return;
  // Flat-buffer parameters were checked in the optimizer's pass; a per-tensor look (3 ops and
  // 2 allocations each) only names the culprit, or covers parameters outside the buffers.
  const bool flat_ok = optimizer_->flat_params_finite();
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    if (flat_ok && optimizer_->is_flat(i)) continue;
    TITAN_CHECK(torch::isfinite(p.param).all().item<bool>(), "step ", step_ + 1,
                ": the optimizer step made parameter ", p.name, " non-finite on rank ", world_->rank(),
                " (optimizer.lr = ", cfg_.optimizer.lr, "); stopping before it is saved");
  }
}

}  // namespace titan
