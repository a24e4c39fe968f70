// Recording cache (see recording_cache.h).
#include "study/recording_cache.h"

#include <chrono>

#include "trainer/config/config_loader.h"
#include "trainer/step/trainer.h"

namespace titan::study {

std::string RecordingCache::key(const JobConfig& cfg) {
  JobConfig k = cfg;
  const ParallelDims d = parallel_dims(cfg, cfg.simulation.num_chips);
  k.parallelism.data_parallel_replicate_degree = d.dp_replicate;
  k.parallelism.data_parallel_shard_degree = d.dp_shard;
  k.parallelism.tensor_parallel_degree = d.tp;
  k.parallelism.pipeline_parallel_degree = d.pp;
  k.parallelism.context_parallel_degree = d.cp;
  const devices::ChipSpec chip = simulated_chip(cfg);
  const bool fused_attention = chip.fused_attention, host_kernels = chip.host_fused_kernels;
  // Replay-only and bookkeeping keys: reset to their defaults.
  const SimulationSection sim;
  k.simulation.device = sim.device;
  k.simulation.num_chips = d.dp_replicate * d.dp_shard * d.tp * d.pp * d.cp;
  k.simulation.topology = sim.topology;
  k.simulation.execution = sim.execution;
  k.simulation.chip_file = sim.chip_file;
  k.simulation.allow_oom = sim.allow_oom;
  k.job = JobSection{};
  k.metrics = MetricsSection{};
  k.checkpoint = CheckpointSection{};
  k.training.steps = 1;
  k.lr_scheduler = LrSchedulerSection{};
  return config_to_toml(k) + "\nfused_attention = " + (fused_attention ? "true" : "false") +
         "\nhost_fused_kernels = " + (host_kernels ? "true" : "false") + "\n";
}

double RecordingCache::record_seconds() const { return static_cast<double>(record_ns_.load()) * 1e-9; }

RecordingCache::RecordingCache() : recorder_([this] { recorder_loop(); }) {}

RecordingCache::~RecordingCache() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  recorder_.join();
}

void RecordingCache::recorder_loop() {
  bool warmed = false;
  for (;;) {
    std::unique_lock<std::mutex> lock(queue_mu_);
    queue_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    auto [cfg, promise] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    try {
      // The first step recorded on a new thread differs from every later one (by up to 2% of
      // the step time: libtorch's per-thread first-use work lands in the trace), so the
      // thread records its first config once and discards it.
      if (!warmed) {
        warmed = true;
        try {
          (void)record_step(cfg);
        } catch (...) {
          warmed = false;  // a config that fails to record warms nothing
        }
      }
      promise->set_value(std::make_shared<const RecordedStep>(record_step(cfg)));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
    ++recordings_;
    record_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  }
}

std::shared_ptr<const RecordedStep> RecordingCache::get(const JobConfig& cfg) { return request(cfg).get(); }

std::shared_future<std::shared_ptr<const RecordedStep>> RecordingCache::request(const JobConfig& cfg) {
  ++lookups_;
  const std::string k = key(cfg);
  std::shared_future<std::shared_ptr<const RecordedStep>> fut;
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    auto it = entries_.find(k);
    if (it != entries_.end()) {
      fut = it->second;
    } else {
      auto promise = std::make_shared<std::promise<std::shared_ptr<const RecordedStep>>>();
      fut = promise->get_future().share();
      entries_.emplace(k, fut);
      {
        std::lock_guard<std::mutex> qlock(queue_mu_);
        queue_.emplace_back(cfg, std::move(promise));
      }
      queue_cv_.notify_one();
    }
  }
  return fut;
}

}  // namespace titan::study
