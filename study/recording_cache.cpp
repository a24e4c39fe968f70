// Recording cache (see recording_cache.h).
#include "study/recording_cache.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "trainer/config/config_loader.h"
#include "trainer/simulate/replica_derivation.h"
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
  k.goodput = GoodputSection{};  // the run model reads only the replay's figures
  return config_to_toml(k) + "\nfused_attention = " + (fused_attention ? "true" : "false") +
         "\nhost_fused_kernels = " + (host_kernels ? "true" : "false") + "\n";
}

std::string RecordingCache::first_not_resized() const {
  std::lock_guard<std::mutex> lock(why_mu_);
  return first_not_resized_;
}

std::string RecordingCache::first_not_derived() const {
  std::lock_guard<std::mutex> lock(why_mu_);
  return first_not_derived_;
}

size_t RecordingCache::probes_held() {
  std::lock_guard<std::mutex> lock(map_mu_);
  return probes_.size();
}

double RecordingCache::record_seconds() const { return static_cast<double>(record_ns_.load()) * 1e-9; }

std::pair<std::shared_ptr<RecordedStep>, ResizeState*> RecordingCache::Spares::take(
    const std::shared_ptr<ShardPlan>& plan) {
  std::unique_ptr<Spare> spare;
  {
    std::lock_guard<std::mutex> lock(mu);
    // The latest spare of this probe; else, of those whose probe no point took lately (a
    // point takes three or four, one per layer sample, and another thread's are likely its
    // next point's), the one taken longest ago; else a new one.
    const int64_t now = ++takes;
    auto pick = std::find_if(free.rbegin(), free.rend(), [&](const auto& s) { return s->state.plan == plan; }).base();
    if (pick != free.begin()) {
      --pick;
    } else {
      pick = free.end();
      for (auto it = free.begin(); it != free.end(); ++it)
        if (now - (*it)->taken > kRecent && (pick == free.end() || (*it)->taken < (*pick)->taken)) pick = it;
    }
    if (pick != free.end()) {
      spare = std::move(*pick);
      free.erase(pick);
    }
    if (!spare) spare = std::make_unique<Spare>();
    spare->taken = now;
  }
  ResizeState* state = &spare->state;
  // Back to the spares when the last holder lets go (the spares outlive the cache if need be).
  std::shared_ptr<Spare> held(spare.release(), [self = shared_from_this()](Spare* s) {
    std::unique_ptr<Spare> owned(s);
    std::lock_guard<std::mutex> lock(self->mu);
    if (self->free.size() == kKept) self->free.erase(self->free.begin());  // the oldest goes
    self->free.push_back(std::move(owned));
  });
  return {std::shared_ptr<RecordedStep>(held, &held->step), state};
}

RecordingCache::RecordingCache(std::vector<std::unique_ptr<Recorder>> recorders)
    : recorders_(std::move(recorders)), in_processes_(!recorders_.empty()) {
  if (recorders_.empty()) recorders_.push_back(in_process_recorder());
  for (auto& r : recorders_) threads_.emplace_back([this, rec = r.get()] { recorder_loop(*rec); });
}

RecordingCache::~RecordingCache() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void RecordingCache::recorder_loop(Recorder& recorder) {
  for (;;) {
    std::unique_lock<std::mutex> lock(queue_mu_);
    queue_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    job(recorder);  // sets its promise, value or exception
  }
}

void RecordingCache::enqueue(Job job) {
  {
    std::lock_guard<std::mutex> qlock(queue_mu_);
    queue_.push_back(std::move(job));
  }
  queue_cv_.notify_one();
}

std::shared_ptr<const RecordedStep> RecordingCache::get(const JobConfig& cfg) { return request(cfg).get(); }

template <class T, class Make>
std::shared_future<std::shared_ptr<const T>> RecordingCache::cached(
    std::map<std::string, std::shared_future<std::shared_ptr<const T>>>& map, const std::string& key, Make make) {
  std::lock_guard<std::mutex> lock(map_mu_);
  auto it = map.find(key);
  if (it != map.end()) return it->second;
  auto promise = std::make_shared<std::promise<std::shared_ptr<const T>>>();
  auto fut = promise->get_future().share();
  map.emplace(key, fut);
  enqueue([this, promise, make](Recorder& recorder) {
    // Counted before the promise is kept: whoever waited on it sees the recording counted.
    const auto t0 = std::chrono::steady_clock::now();
    auto counted = [&] {
      ++recordings_;
      record_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    };
    try {
      auto made = make(recorder);
      counted();
      promise->set_value(std::move(made));
    } catch (...) {
      counted();
      promise->set_exception(std::current_exception());
    }
  });
  return fut;
}

std::shared_future<std::shared_ptr<const RecordedStep>> RecordingCache::request_recorded(const JobConfig& cfg) {
  return cached(entries_, key(cfg),
                [cfg](Recorder& r) { return std::make_shared<const RecordedStep>(r.record(cfg)); });
}

RecordingCache::ProbeFuture RecordingCache::record_probe_of(const JobConfig& cfg, const std::string& k) {
  return cached(probes_, k, [this, cfg](Recorder& r) {
    auto probe = std::make_shared<const ProbeRecording>(r.probe(cfg, probe_degree_.load()));
    probe_degree_ = probe->degree;
    return probe;
  });
}

std::string RecordingCache::probe_key(const JobConfig& cfg) { return key(with_shard_degree(cfg, 2)); }

RecordingCache::ProbeFuture RecordingCache::request_probe(const JobConfig& cfg, const std::string& k, bool prefetch) {
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    if (auto it = probes_.find(k); it != probes_.end()) return it->second;
  }
  std::optional<ProbeFuture> from;  // the dp_replicate 2 layout's probe, to derive this one from
  std::string from_key;
  try {
    if (derive_replicas && replica_derivable(cfg)) {
      const JobConfig two = with_two_replicas(cfg);
      from_key = probe_key(two);
      from = request_probe(two, from_key, prefetch);
    }
  } catch (const std::exception&) {
    // degrees that do not resolve at dp_replicate 2: recorded as it is
  }
  if (!from) return record_probe_of(cfg, k);
  std::lock_guard<std::mutex> lock(map_mu_);
  if (auto it = probes_.find(k); it != probes_.end()) return it->second;
  // Derived by whoever waits on it first; recorded after all if the dp_replicate 2 layout
  // fails (a config error: cfg's own recording reports its own) or cannot be derived from.
  // The derivation counts as a use of the dp_replicate 2 probe, released when it is done.
  auto derive = [this, cfg, k, from = *from, from_key, prefetch]() -> std::shared_ptr<const ProbeRecording> {
    std::shared_ptr<const ProbeRecording> made;
    try {
      made = std::make_shared<const ProbeRecording>(probe_without_replicas(*from.get(), cfg));
      ++derived_replicas;
    } catch (const std::exception& e) {
      ++not_derived;
      {
        std::lock_guard<std::mutex> lock(why_mu_);
        if (first_not_derived_.empty()) first_not_derived_ = e.what();
      }
      const std::string recorded = "recorded\n" + k;
      try {
        made = record_probe_of(cfg, recorded).get();
      } catch (...) {
        if (prefetch) release_prefetched(from_key);
        throw;
      }
      std::lock_guard<std::mutex> lock(map_mu_);
      probes_.erase(recorded);  // held by this probe's own entry from now on
    }
    if (prefetch) release_prefetched(from_key);
    return made;
  };
  ProbeFuture fut = std::async(std::launch::deferred, derive).share();
  probes_.emplace(k, fut);
  if (prefetch) ++prefetched_[from_key];
  return fut;
}

void RecordingCache::release_prefetched(const std::string& k) {
  std::lock_guard<std::mutex> lock(map_mu_);
  auto it = prefetched_.find(k);
  if (it == prefetched_.end() || --it->second > 0) return;
  prefetched_.erase(it);
  if (!pinned_.count(k)) probes_.erase(k);
}

std::shared_future<std::shared_ptr<const RecordedStep>> RecordingCache::request(const JobConfig& cfg, bool counted) {
  if (counted) ++lookups_;
  bool resizable = false;
  try {
    resizable = resize_shards && shard_resizable(cfg);
  } catch (const std::exception&) {
    // degrees that do not resolve: the recording reports the error
  }
  if (!resizable) return request_recorded(cfg);
  const std::string k = probe_key(cfg);
  ProbeFuture probe = request_probe(cfg, k, !counted);
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    if (counted)
      pinned_.insert(k);
    else
      ++prefetched_[k];
  }
  return std::async(std::launch::deferred, [this, probe, cfg, k, counted]() -> std::shared_ptr<const RecordedStep> {
           // A prefetch's use of the probe ends with its resize (the resized step holds what it
           // needs of the probe's plan); the last one's drops the cache's hold on the probe.
           struct Release {
             RecordingCache* cache;
             const std::string* key;
             ~Release() {
               if (cache) cache->release_prefetched(*key);
             }
           } release{counted ? nullptr : this, &k};
           std::shared_ptr<const ProbeRecording> p;
           std::string why;
           try {
             p = probe.get();
           } catch (const std::exception& e) {
             // A probe that fails (a config error, sizes resizing cannot follow): cfg is
             // recorded itself, and reports its own errors.
             why = e.what();
           }
           auto [r, state] = spare_->take(p ? p->plan : nullptr);
           if (p && resize_for_shard_degree(*p, cfg, r.get(), &why, state)) {
             ++resized;
             if (state->last_in_place) ++resized_in_place;
             return r;
           }
           ++not_resized;
           {
             std::lock_guard<std::mutex> lock(why_mu_);
             if (first_not_resized_.empty()) first_not_resized_ = why;
           }
           return request_recorded(cfg).get();
         })
      .share();
}

}  // namespace titan::study
