#include "trainer/trainer.h"

#include <chrono>

#include "devices/error.h"
#include "trainer/train.h"

namespace titan {
namespace {

double all_reduce_sum(Communicator& group, double v) {
  auto t = torch::tensor({v}, torch::kFloat64);
  group.all_reduce(t, ReduceOp::kSum)->wait();
  return t.item<double>();
}

}  // namespace

CommOptions comm_options(const JobConfig& cfg) {
  CommOptions o;
  o.backend = cfg.comm.backend;
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

Trainer::Trainer(const JobConfig& cfg, std::shared_ptr<World> world) : cfg_(cfg), world_(std::move(world)) {
  torch::set_num_threads(choose_threads(cfg_));
  if (cfg_.training.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  torch::manual_seed(cfg_.training.seed);
  if (!world_) world_ = init_distributed(comm_options(cfg_));
  dims_ = parallel_dims(cfg_, world_->size());
  TITAN_CONFIG_CHECK(dims_.tp == 1 && dims_.pp == 1 && dims_.cp == 1,
                     "tensor, pipeline and context parallelism are not implemented yet (", dims_.to_string(),
                     "); use data_parallel_shard_degree / data_parallel_replicate_degree");
  mesh_ = ParallelDims(dims_).build_mesh(world_);

  tokenizer_ = make_tokenizer(cfg_.model.tokenizer_path);
  const std::string data_path =
      cfg_.training.dataset_path.empty() ? default_corpus_path() : cfg_.training.dataset_path;
  auto tokens = std::make_shared<const std::vector<int64_t>>(tokenize_file(*tokenizer_, data_path));

  args_ = resolve_model_args(cfg_.model, tokenizer_->vocab_size());
  model_ = Transformer(args_, cfg_.training.seq_len,
                       torch::TensorOptions().dtype(dtype_named(cfg_.training.mixed_precision_param)));
  // Full weights from the seed on every rank, then sharded: any mesh starts alike.
  model_->init_weights(static_cast<uint64_t>(cfg_.training.seed));
  parallel_ = parallelize(model_, *mesh_, cfg_);

  const int64_t dp = mesh_->size("dp");
  const int64_t local_bs = cfg_.training.local_batch_size;
  global_batch_ = cfg_.training.global_batch_size > 0 ? cfg_.training.global_batch_size : local_bs * dp;
  TITAN_CONFIG_CHECK(global_batch_ % (local_bs * dp) == 0, "training.global_batch_size (", global_batch_,
                     ") must be a multiple of local_batch_size x data-parallel degree (", local_bs, " x ",
                     dp, ")");
  loader_ = std::make_unique<DataLoader>(tokens, cfg_.training.seq_len, global_batch_,
                                         mesh_->coordinate("dp"), dp);

  for (auto& p : model_->named_parameters()) params_.push_back({p.key(), p.value()});
  optimizer_ = std::make_unique<AdamW>(params_, cfg_.optimizer);
}

int64_t Trainer::param_bytes() const {
  int64_t b = 0;
  for (auto& p : params_) b += p.param.nbytes();
  return b;
}

Trainer::StepResult Trainer::train_step() {
  auto t0 = std::chrono::steady_clock::now();
  const int64_t local_bs = cfg_.training.local_batch_size;
  const double normalizer = static_cast<double>(tokens_per_step());
  Batch batch = loader_->next();
  optimizer_->zero_grad();
  StepResult r;
  const int64_t micro = batch.inputs.size(0) / local_bs;
  for (int64_t m = 0; m < micro; ++m) {
    auto in = batch.inputs.narrow(0, m * local_bs, local_bs);
    auto lab = batch.labels.narrow(0, m * local_bs, local_bs);
    auto loss = cross_entropy_sum(model_->forward(in), lab, normalizer);
    loss.backward();
    if (parallel_.fsdp) parallel_.fsdp->finish_backward();
    r.loss += loss.item<double>();
  }
  r.loss = all_reduce_sum(*(*mesh_)["dp"], r.loss);
  // Shards of one parameter live on the fsdp group; replicas hold equal copies.
  r.grad_norm = std::sqrt(all_reduce_sum(*(*mesh_)["fsdp"], local_grad_sq_norm(params_)));
  clip_grads(params_, r.grad_norm, cfg_.training.max_norm);
  r.lr = cfg_.optimizer.lr * lr_factor(cfg_.lr_scheduler, cfg_.training.steps, step_);
  optimizer_->step(r.lr);
  ++step_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace titan
