#include "trainer/train.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <torch/torch.h>

#include "devices/error.h"
#include "trainer/config_loader.h"
#include "trainer/data_loader.h"
#include "trainer/metrics.h"
#include "trainer/model.h"
#include "trainer/optimizer.h"
#include "trainer/parallelize.h"
#include "trainer/tokenizer.h"
#include "collectives/world.h"
#include "parallel/parallel_dims.h"

namespace titan {
namespace {

torch::ScalarType dtype_of(const std::string& name) {
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  return torch::kFloat32;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

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

int choose_threads(const JobConfig& cfg) {
  if (cfg.training.threads > 0) return static_cast<int>(cfg.training.threads);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int local_ranks = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_int("TITAN_LOCAL_WORLD_SIZE", 1));
  return std::max(1, cores / std::max(1, local_ranks));
}

std::string default_corpus_path() { return std::string(TITAN_SOURCE_DIR) + "/trainer/data/corpus.txt"; }

TrainResult train(const JobConfig& cfg) {
  torch::set_num_threads(choose_threads(cfg));
  if (cfg.training.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  torch::manual_seed(cfg.training.seed);

  auto tokenizer = make_tokenizer(cfg.model.tokenizer_path);
  const std::string data_path =
      cfg.training.dataset_path.empty() ? default_corpus_path() : cfg.training.dataset_path;
  auto tokens = std::make_shared<const std::vector<int64_t>>(tokenize_file(*tokenizer, data_path));

  const ModelArgs args = resolve_model_args(cfg.model, tokenizer->vocab_size());
  const auto dtype = dtype_of(cfg.training.mixed_precision_param);
  Transformer model(args, cfg.training.seq_len, torch::TensorOptions().dtype(dtype));
  model->init_weights(static_cast<uint64_t>(cfg.training.seed));

  auto world = init_distributed(comm_options(cfg));
  const ParallelDims dims = parallel_dims(cfg, world->size());
  TITAN_CONFIG_CHECK(dims.tp == 1 && dims.pp == 1 && dims.cp == 1,
                     "tensor, pipeline and context parallelism are not implemented yet (", dims.to_string(),
                     "); use data_parallel_shard_degree / data_parallel_replicate_degree");
  auto mesh = ParallelDims(dims).build_mesh(world);
  const bool writer = world->rank() == 0;

  const ParallelizedModel parallel = parallelize(model, *mesh, cfg);
  const int64_t dp = mesh->size("dp"), dp_rank = mesh->coordinate("dp");
  const int64_t local_bs = cfg.training.local_batch_size;
  const int64_t global_bs =
      cfg.training.global_batch_size > 0 ? cfg.training.global_batch_size : local_bs * dp;
  TITAN_CONFIG_CHECK(global_bs % (local_bs * dp) == 0, "training.global_batch_size (", global_bs,
                     ") must be a multiple of local_batch_size x data-parallel degree (",
                     local_bs, " x ", dp, ")");
  DataLoader loader(tokens, cfg.training.seq_len, global_bs, dp_rank, dp);

  std::vector<NamedParam> params;
  for (auto& p : model->named_parameters()) params.push_back({p.key(), p.value()});
  AdamW optimizer(params, cfg.optimizer);

  const double peak = cfg.metrics.peak_flops > 0 ? cfg.metrics.peak_flops : measure_peak_flops();
  const double fpt = flops_per_token(args, cfg.training.seq_len);
  MetricsLogger logger(cfg.job.dump_folder, writer);
  const double tokens_per_step = double(global_bs) * cfg.training.seq_len;
  int64_t param_bytes = 0;
  for (auto& p : params) param_bytes += p.param.nbytes();
  if (writer) {
    std::printf("titan: %s %s (%.2fM params), world %d: %s, %s collectives over %s\n",
                args.name.c_str(), args.flavor.c_str(), args.num_params() / 1e6, world->size(),
                dims.to_string().c_str(), cfg.comm.collective_mode.c_str(), cfg.comm.backend.c_str());
  }

  TrainResult result;
  for (int64_t step = 1; step <= cfg.training.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    Batch batch = loader.next();
    optimizer.zero_grad();
    double loss_sum = 0;
    const int64_t micro = batch.inputs.size(0) / local_bs;
    for (int64_t m = 0; m < micro; ++m) {
      auto in = batch.inputs.narrow(0, m * local_bs, local_bs);
      auto lab = batch.labels.narrow(0, m * local_bs, local_bs);
      auto loss = cross_entropy_sum(model->forward(in), lab, tokens_per_step);
      loss.backward();
      if (parallel.fsdp) parallel.fsdp->finish_backward();
      loss_sum += loss.item<double>();
    }
    loss_sum = all_reduce_sum(*(*mesh)["dp"], loss_sum);
    // Shards of one parameter live on the fsdp group; replicas hold equal copies.
    const double grad_norm = std::sqrt(all_reduce_sum(*(*mesh)["fsdp"], local_grad_sq_norm(params)));
    clip_grads(params, grad_norm, cfg.training.max_norm);
    const double lr = cfg.optimizer.lr * lr_factor(cfg.lr_scheduler, cfg.training.steps, step - 1);
    optimizer.step(lr);
    const double dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    result.losses.push_back(loss_sum);
    result.grad_norms.push_back(grad_norm);
    if (step == 1 || step % cfg.metrics.log_freq == 0 || step == cfg.training.steps) {
      StepMetrics m;
      m.step = step, m.loss = loss_sum, m.grad_norm = grad_norm, m.lr = lr, m.step_time_s = dt;
      m.tps = tokens_per_step / dt / world->size();
      m.tflops = fpt * m.tps / 1e12;
      m.mfu_percent = 100.0 * fpt * m.tps / peak;
      m.param_gib = param_bytes / 1073741824.0;
      m.grad_gib = param_bytes / 1073741824.0;
      m.optimizer_gib = optimizer.state_bytes() / 1073741824.0;
      logger.log(m);
    }
  }
  result.final_params.clear();
  for (auto& p : params) result.final_params[p.name] = p.param.detach().clone();
  return result;
}

}  // namespace titan
