// Recording cache (see recording_cache.h).
#include "study/recording_cache.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "trainer/config/config_loader.h"
#include "trainer/simulate/replica_derivation.h"
#include "trainer/step/trainer.h"

namespace titan::study {
namespace {
thread_local int64_t this_point = -1;  // the point this thread evaluates (RecordingCache::evaluating)
}  // namespace

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
  std::lock_guard<std::mutex> lock(probes_->mu);
  return probes_->entries.size();
}

double RecordingCache::record_seconds() const { return static_cast<double>(record_ns_.load()) * 1e-9; }

double RecordingCache::recorder_cpu_seconds() const {
  double s = 0;
  for (const auto& r : recorders_) s += r->cpu_seconds();
  return s;
}

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
    auto next = [&] {
      return std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) {
        return lookahead_ <= 0 || j.needed_by <= evaluating_ + lookahead_;
      });
    };
    queue_cv_.wait(lock, [&] { return stop_ || next() != queue_.end(); });
    const auto at = next();
    if (at == queue_.end()) return;  // stopping; what is left is beyond the lookahead
    Job job = std::move(*at);
    queue_.erase(at);
    lock.unlock();
    job.run(recorder);  // sets its promise, value or exception
  }
}

std::deque<RecordingCache::Job>::iterator RecordingCache::first_prefetch() {
  return std::find_if(queue_.begin(), queue_.end(), [](const Job& j) { return j.needed_by != kNow; });
}

void RecordingCache::enqueue(Job job) {
  {
    std::lock_guard<std::mutex> qlock(queue_mu_);
    queue_.insert(job.needed_by == kNow ? first_prefetch() : queue_.end(), std::move(job));
  }
  queue_cv_.notify_all();
}

void RecordingCache::promote(const std::string& k) {
  {
    std::lock_guard<std::mutex> qlock(queue_mu_);
    const auto at = std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return j.key == k; });
    if (at == queue_.end() || at->needed_by == kNow) return;
    Job job = std::move(*at);
    queue_.erase(at);
    job.needed_by = kNow;
    queue_.insert(first_prefetch(), std::move(job));
  }
  queue_cv_.notify_all();
}

void RecordingCache::begin_points(int64_t lookahead) {
  std::lock_guard<std::mutex> qlock(queue_mu_);
  lookahead_ = lookahead;
  evaluating_ = 0;
  evaluating_by_thread_.clear();
}

void RecordingCache::end_points() {
  {
    std::lock_guard<std::mutex> qlock(queue_mu_);
    lookahead_ = 0;
    evaluating_by_thread_.clear();
  }
  prefetch_point_ = kNow;
  queue_cv_.notify_all();
}

void RecordingCache::evaluating(int64_t k) {
  this_point = k;
  int64_t slowest = k, window = 0;
  {
    std::lock_guard<std::mutex> qlock(queue_mu_);
    evaluating_by_thread_[std::this_thread::get_id()] = k;
    for (const auto& [thread, point] : evaluating_by_thread_) slowest = std::min(slowest, point);
    evaluating_ = std::max(evaluating_, k);
    window = lookahead_;
  }
  queue_cv_.notify_all();
  if (window <= 0) return;
  std::vector<ProbeFuture> gone;  // destroyed unlocked, as in Probes::release
  std::lock_guard<std::mutex> lock(probes_->mu);
  for (auto it = probes_->pinned.begin(); it != probes_->pinned.end();) {
    if (it->second >= slowest - window) {
      ++it;
      continue;
    }
    if (!probes_->prefetched.count(it->first))
      if (auto e = probes_->entries.find(it->first); e != probes_->entries.end()) {
        gone.push_back(std::move(e->second));
        probes_->entries.erase(e);
      }
    it = probes_->pinned.erase(it);
  }
}

std::shared_ptr<const RecordedStep> RecordingCache::get(const JobConfig& cfg) { return request(cfg).get(); }

template <class T, class Make>
std::shared_future<std::shared_ptr<const T>> RecordingCache::record_later(Make make, int64_t needed_by, std::string key) {
  auto promise = std::make_shared<std::promise<std::shared_ptr<const T>>>();
  auto fut = promise->get_future().share();
  Job job;
  job.needed_by = needed_by;
  job.key = std::move(key);
  job.run = [this, promise, make](Recorder& recorder) {
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
  };
  enqueue(std::move(job));
  return fut;
}

std::shared_future<std::shared_ptr<const RecordedStep>> RecordingCache::request_recorded(const JobConfig& cfg,
                                                                                         bool prefetch) {
  const std::string k = key(cfg);
  std::lock_guard<std::mutex> lock(map_mu_);
  auto it = entries_.find(k);
  if (it != entries_.end()) {
    if (!prefetch) promote(k);
    return it->second;
  }
  auto fut = record_later<RecordedStep>([cfg](Recorder& r) { return std::make_shared<const RecordedStep>(r.record(cfg)); },
                                        needed_by(prefetch), k);
  entries_.emplace(k, fut);
  return fut;
}

std::string RecordingCache::probe_key(const JobConfig& cfg) { return key(with_shard_degree(cfg, 2)); }

void RecordingCache::Probes::release(const std::string& k) {
  ProbeFuture gone;  // destroyed unlocked: a derived probe's derivation may hold another's use
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = prefetched.find(k);
    if (it == prefetched.end() || --it->second > 0) return;
    prefetched.erase(it);
    if (pinned.count(k)) return;
    auto e = entries.find(k);
    if (e == entries.end()) return;
    gone = std::move(e->second);
    entries.erase(e);
  }
}

RecordingCache::ProbeHold::~ProbeHold() {
  if (auto p = probes.lock()) p->release(key);
}

RecordingCache::Hold RecordingCache::note_use(const std::string& k, bool prefetch) {
  if (!prefetch) {
    int64_t& last = probes_->pinned[k];
    last = std::max(last, this_point);
    return nullptr;
  }
  ++probes_->prefetched[k];
  return std::make_shared<ProbeHold>(probes_, k);
}

RecordingCache::ProbeFuture RecordingCache::request_probe(const JobConfig& cfg, const std::string& k, bool prefetch,
                                                          Hold* hold) {
  {
    std::lock_guard<std::mutex> lock(probes_->mu);
    if (auto it = probes_->entries.find(k); it != probes_->entries.end()) {
      *hold = note_use(k, prefetch);
      if (!prefetch) {
        // A derived probe waits on its dp_replicate 2 probe's recording.
        promote(k);
        try {
          if (derive_replicas && replica_derivable(cfg)) promote(probe_key(with_two_replicas(cfg)));
        } catch (const std::exception&) {
          // not derived: nothing else to wait for
        }
      }
      return it->second;
    }
  }
  std::optional<ProbeFuture> from;  // the dp_replicate 2 layout's probe, to derive this one from
  Hold from_hold;                   // the derivation's use of it
  try {
    if (derive_replicas && replica_derivable(cfg)) {
      const JobConfig two = with_two_replicas(cfg);
      from = request_probe(two, probe_key(two), prefetch, &from_hold);
    }
  } catch (const std::exception&) {
    // degrees that do not resolve at dp_replicate 2: recorded as it is
  }
  auto record = [this, cfg](Recorder& r) {
    auto probe = std::make_shared<const ProbeRecording>(r.probe(cfg, probe_degree_.load()));
    probe_degree_ = probe->degree;
    return probe;
  };
  std::lock_guard<std::mutex> lock(probes_->mu);
  *hold = note_use(k, prefetch);
  if (auto it = probes_->entries.find(k); it != probes_->entries.end()) return it->second;  // from_hold goes unused
  if (!from) return probes_->entries.emplace(k, record_later<ProbeRecording>(record, needed_by(prefetch), k)).first->second;
  // Derived by whoever waits on it first; recorded after all if the dp_replicate 2 layout
  // fails (a config error: cfg's own recording reports its own) or cannot be derived from.
  // The lambda lives as long as this entry does: it lets go of the dp_replicate 2 probe, and
  // of its use, once the derivation is done.
  auto derive = [this, cfg, k, record, from = *from, from_hold]() mutable -> std::shared_ptr<const ProbeRecording> {
    ProbeFuture src = std::move(from);
    Hold used = std::move(from_hold);
    try {
      auto made = std::make_shared<const ProbeRecording>(probe_without_replicas(*src.get(), cfg));
      ++derived_replicas;
      return made;
    } catch (const std::exception& e) {
      ++not_derived;
      {
        std::lock_guard<std::mutex> lock(why_mu_);
        if (first_not_derived_.empty()) first_not_derived_ = e.what();
      }
    }
    src = {}, used.reset();
    return record_later<ProbeRecording>(record, kNow, k).get();  // held by this probe's entry alone
  };
  ProbeFuture fut = std::async(std::launch::deferred, std::move(derive)).share();
  probes_->entries.emplace(k, fut);
  return fut;
}

std::shared_future<std::shared_ptr<const RecordedStep>> RecordingCache::request(const JobConfig& cfg, bool counted) {
  if (counted) ++lookups_;
  bool resizable = false;
  try {
    resizable = resize_shards && shard_resizable(cfg);
  } catch (const std::exception&) {
    // degrees that do not resolve: the recording reports the error
  }
  if (!resizable) return request_recorded(cfg, !counted);
  Hold hold;  // a prefetch's use of the probe, released once it is resized
  ProbeFuture probe = request_probe(cfg, probe_key(cfg), !counted, &hold);
  return std::async(std::launch::deferred, [this, probe, cfg, hold]() mutable -> std::shared_ptr<const RecordedStep> {
           std::shared_ptr<const ProbeRecording> p;
           std::string why;
           try {
             p = probe.get();
           } catch (const std::exception& e) {
             // A probe that fails (a config error, sizes resizing cannot follow): cfg is
             // recorded itself, and reports its own errors.
             why = e.what();
           }
           probe = {};
           auto [r, state] = spare_->take(p ? p->plan : nullptr);
           const bool ok = p && resize_for_shard_degree(*p, cfg, r.get(), &why, state);
           // The resized step holds what it needs of the probe's plan.
           p.reset(), hold.reset();
           if (ok) {
             ++resized;
             if (state->last_in_place) ++resized_in_place;
             return r;
           }
           ++not_resized;
           {
             std::lock_guard<std::mutex> lock(why_mu_);
             if (first_not_resized_.empty()) first_not_resized_ = why;
           }
           return request_recorded(cfg, /*prefetch=*/false).get();
         })
      .share();
}

}  // namespace titan::study
