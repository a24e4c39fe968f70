#include "trainer/train.h"

#include <chrono>
#include <cstdio>

#include <torch/torch.h>

#include "common/error.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/step/trainer.h"

namespace titan {
TrainResult train(const JobConfig& cfg) {
  Trainer trainer(cfg);
  const ModelArgs& args = trainer.model_args();
  const bool writer = trainer.is_writer();
  const double peak = cfg.metrics.peak_flops > 0 ? cfg.metrics.peak_flops : measure_peak_flops();
  const double fpt = flops_per_token(args, cfg.training.seq_len);
  const int world = trainer.world().size();
  const double gib = 1073741824.0;
  if (writer) {
    std::printf("titan: %s %s (%.2fM params), world %d: %s, %s collectives over %s\n"
                "titan: memory per rank: parameters %.2f MiB, gradients %.2f MiB, optimizer %.2f MiB\n",
                args.name.c_str(), args.flavor.c_str(), args.num_params() / 1e6, world,
                trainer.dims().to_string().c_str(), to_string(cfg.comm.collective_mode).c_str(), to_string(cfg.comm.backend).c_str(),
                trainer.param_bytes() / 1048576.0, trainer.param_bytes() / 1048576.0,
                trainer.optimizer().state_bytes() / 1048576.0);
  }
  TrainResult result;
  Checkpointer checkpointer(trainer);  // resumes (or loads initial weights) when configured
  checkpointer.load_at_start();
  if (checkpointer.create_seed_checkpoint()) return result;
  MetricsLogger logger(cfg.job.dump_folder, writer, /*append=*/trainer.step() > 0);
  while (trainer.step() < cfg.training.steps) {
    const Trainer::StepResult r = trainer.train_step();
    const int64_t step = trainer.step();
    const bool stop = checkpointer.after_step(step, cfg.training.steps);  // true: test hook exit_after_step
    result.losses.push_back(r.loss);
    result.grad_norms.push_back(r.grad_norm);
    if (step == 1 || step % cfg.metrics.log_freq == 0 || step == cfg.training.steps) {
      StepMetrics m;
      m.step = step, m.loss = r.loss, m.grad_norm = r.grad_norm, m.lr = r.lr, m.step_time_s = r.seconds;
      m.tps = trainer.tokens_per_step() / r.seconds / world;
      m.tflops = fpt * m.tps / 1e12;
      m.mfu_percent = 100.0 * fpt * m.tps / peak;
      m.param_gib = trainer.param_bytes() / gib;
      m.grad_gib = trainer.param_bytes() / gib;
      m.optimizer_gib = trainer.optimizer().state_bytes() / gib;
      logger.log(m);
    }
    if (stop) break;
  }
  for (auto& p : trainer.model()->named_parameters()) result.final_params[p.key()] = p.value().detach().clone();
  return result;
}

}  // namespace titan
