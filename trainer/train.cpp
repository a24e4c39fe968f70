#include "trainer/train.h"

#include <chrono>
#include <cstdio>

#include <torch/torch.h>

#include "collectives/communicator.h"
#include "common/error.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/peak_flops.h"
#include "trainer/step_profiler.h"
#include "trainer/stop_signals.h"
#include "trainer/step/trainer.h"

namespace titan {
TrainResult train(const JobConfig& cfg) {
  Trainer trainer(cfg);
  const ModelArgs& args = trainer.model_args();
  const bool writer = trainer.is_writer();
  const PeakFlops peak = resolve_peak_flops(cfg, torch::get_num_threads());
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
    std::printf("titan: MFU peak %.3g FLOP/s per rank (%d threads) from %s\n", peak.flops, torch::get_num_threads(),
                peak.source.c_str());
    // Only the simulator models async TP (devices/collective_matmul.h); a real run still works.
    if (cfg.parallelism.enable_async_tensor_parallel)
      std::printf("titan: warning: parallelism.enable_async_tensor_parallel is modelled in simulation only; this "
                  "run's tensor-parallel collectives stay blocking\n");
  }
  std::string mfu_warning;  // set the first time MFU would exceed 100%: printed once
  bool mfu_warned = false;
  TrainResult result;
  Checkpointer checkpointer(trainer);  // resumes (or loads initial weights) when configured
  checkpointer.load_at_start();
  // Resumed past the end, the loop below would run no step and the job end "successfully"
  // having trained nothing (a reused dump folder with a shorter run's config). steps = 0
  // asks for no training: it loads and stops.
  TITAN_CONFIG_CHECK(cfg.training.steps == 0 || trainer.step() <= cfg.training.steps, "checkpoint: resumed at step ",
                     trainer.step(), " from ", checkpointer.folder(), ", past training.steps = ", cfg.training.steps,
                     ": raise training.steps to go on from it, pick an earlier step with checkpoint.load_step, or "
                     "use another checkpoint.folder");
  if (checkpointer.create_seed_checkpoint()) return result;
  StepProfiler profiler(cfg, trainer.world().comm().get());
  MetricsLogger logger(cfg.job.dump_folder, writer, /*append=*/trainer.step() > 0);
  // A stop signal counts once every rank has seen it (the ranks agree at step ends, so that
  // none enters a step the others left).
  auto agreed_stop = [&] {
    if (world == 1) return stop_signal();
    auto x = torch::tensor({double(stop_signal())}, torch::kFloat64);
    trainer.world().comm()->all_reduce(x, ReduceOp::kMax)->wait();
    return static_cast<int>(x.item<double>());
  };
  auto stop_now = [&](int signo) {
    checkpointer.wait();  // an async save in flight completes
    int removed = 0;
    if (trainer.world().rank() == 0) removed = remove_unfinished_saves(checkpointer.folder());
    if (writer) {
      const auto saved = list_step_folders(checkpointer.folder());
      std::string where = checkpointer.enabled() && !saved.empty() ? "newest checkpoint " + saved.front().path
                                                                   : std::string("no checkpoint");
      if (removed) where += ", removed " + std::to_string(removed) + " unfinished save folder(s)";
      std::printf("titan: stopped by %s after step %lld of %lld; %s\n", signal_name(signo).c_str(),
                  static_cast<long long>(trainer.step()), static_cast<long long>(cfg.training.steps), where.c_str());
      std::fflush(stdout);
    }
    result.stop_signal = signo;
  };
  note_training_loop_started();  // a stop signal now waits for a step end (stop_signals.h)
  while (trainer.step() < cfg.training.steps) {
    if (const int signo = agreed_stop()) {
      stop_now(signo);
      break;
    }
    profiler.before_step(trainer.step() + 1);
    const Trainer::StepResult r = trainer.train_step();
    const int64_t step = trainer.step();
    const std::string trace = profiler.after_step(step);
    if (!trace.empty() && writer) std::printf("titan: profiling: wrote %s (step %lld)\n", trace.c_str(), static_cast<long long>(step));
    const bool stop = checkpointer.after_step(step, cfg.training.steps);  // true: test hook exit_after_step
    result.losses.push_back(r.loss);
    result.grad_norms.push_back(r.grad_norm);
    if (step == 1 || step % cfg.metrics.log_freq == 0 || step == cfg.training.steps) {
      StepMetrics m;
      m.step = step, m.loss = r.loss, m.grad_norm = r.grad_norm, m.lr = r.lr, m.step_time_s = r.seconds;
      m.tps = trainer.tokens_per_step() / r.seconds / world;
      m.tflops = fpt * m.tps / 1e12;
      m.mfu_percent = capped_mfu_percent(fpt * m.tps, peak, &mfu_warning);
      if (!mfu_warning.empty() && !mfu_warned && writer) std::printf("%s\n", mfu_warning.c_str());
      mfu_warned = !mfu_warning.empty();
      m.param_gib = trainer.param_bytes() / gib;
      m.grad_gib = trainer.param_bytes() / gib;
      m.optimizer_gib = trainer.optimizer().state_bytes() / gib;
      logger.log(m);
    }
    if (stop) break;
  }
  if (result.stop_signal == 0) {
    if (const int signo = agreed_stop()) stop_now(signo);  // arrived in the last step or save
  }
  for (auto& p : trainer.model()->named_parameters()) result.final_params[p.key()] = p.value().detach().clone();
  return result;
}

}  // namespace titan
