// RecordingCache: one recorded step per distinct per-rank shape, shared by every study point
// that replays it (other devices, topologies, execution modes). Recordings are made by
// recorders (study/recorder_pool.h): recorder processes, several at once, or this process,
// where recording drives libtorch's global RecordFunction callbacks and the process-wide sim
// World, so one at a time; each recorder has a thread here that feeds it from one queue.
// Replays run in parallel on the shared, read-only recordings. Used by evaluate.cpp.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "study/recorder_pool.h"
#include "trainer/config/job_config.h"
#include "trainer/simulate/shard_resize.h"
#include "trainer/simulate/simulate.h"

namespace titan::study {

class RecordingCache {
 public:
  // No recorders: one in this process.
  explicit RecordingCache(std::vector<std::unique_ptr<Recorder>> recorders = {});
  ~RecordingCache();
  RecordingCache(const RecordingCache&) = delete;
  RecordingCache& operator=(const RecordingCache&) = delete;

  // The recording for cfg's per-rank step; records it on first use. A recording that failed
  // (a config error: degrees, divisibility) rethrows the same error to every later caller.
  std::shared_ptr<const RecordedStep> get(const JobConfig& cfg);
  // The same, without waiting: queues the recording (if new) and returns where it will be, so
  // that a caller needing several recordings keeps the recorders busy. A resized step
  // is made by whoever waits on it first (on that thread) and is not kept: it takes a
  // millisecond to make and as much memory as a recording.
  // counted = false: a prefetch, not a lookup (lookups() counts what points replay). A
  // prefetch holds its probe until its resize is done, or until it is dropped unused; when
  // the last prefetch of a probe lets go, so does the cache (a study prefetches all its points
  // before it evaluates any, so a layout's probes are freed once its points have them, and the
  // study's memory stays near what the points in flight hold; a later request records it
  // again). A probe a lookup asked for is kept.
  std::shared_future<std::shared_ptr<const RecordedStep>> request(const JobConfig& cfg, bool counted = true);

  // Layer extrapolation (trainer/simulate/layer_extrapolation.h) for the points evaluated
  // through this cache; off: every point is recorded at its own depth.
  bool layer_extrapolation = true;
  // Shard resizing (trainer/simulate/shard_resize.h): a layout is recorded once at a probe
  // dp_shard degree and resized for every degree asked; off: every degree is recorded.
  bool resize_shards = true;
  std::atomic<int64_t> resized{0};  // steps resized from a probe (not recorded themselves)
  std::atomic<int64_t> resized_in_place{0};  // of which rewritten in a spare of the same probe
  std::atomic<int64_t> not_resized{0};  // resizable steps recorded after all, and the first why
  std::string first_not_resized() const;
  // Replica derivation (trainer/simulate/replica_derivation.h): a layout's dp_replicate 1
  // probe made from its dp_replicate 2 probe instead of recorded; off: both are recorded.
  bool derive_replicas = true;
  std::atomic<int64_t> derived_replicas{0};  // probes derived (not recorded themselves)
  std::atomic<int64_t> not_derived{0};  // derivations refused (recorded after all), and the first why
  std::string first_not_derived() const;
  std::atomic<int64_t> extrapolated{0};   // points whose figures came from shallow samples
  std::atomic<int64_t> full_depth{0};     // points recorded at their own depth
  // Sample sets that failed the affine check, each sending its point one layer step deeper
  // (a replay, and a recording unless another point asked for it first).
  std::atomic<int64_t> failed_fits{0};
  // Replays of a probe's traces (pipeline segments resizing left as recorded) that the
  // evaluating threads' memos answered, and those they made (devices/replay_memo.h).
  std::atomic<int64_t> replays_remembered{0}, replays_named{0};

  // Points evaluated in a known order, each after its prefetches were queued (a study's
  // search): the recorders then record at most `lookahead` points ahead of the slowest thread,
  // and a recording a point looked up (a deeper layer sample) is let go once no thread has
  // looked it up for `lookahead` points (a later lookup records it again). Without it, a
  // search over every chip count recorded its layouts long before their points came and held
  // them: launch/bench-study peaked at 600 MB, touched for the first time (a page fault per
  // 4 KiB, about 10 us each on this project's VMs). Between begin_points and end_points, a
  // prefetch is for the point named by the last prefetching_for, and a thread evaluates the
  // point named by its last evaluating.
  void begin_points(int64_t lookahead);
  void prefetching_for(int64_t k) { prefetch_point_ = k; }
  void evaluating(int64_t k);
  void end_points();  // records freely again (the rest of the queue, then what is asked)

  int64_t recordings() const { return recordings_; }  // steps recorded (cache misses)
  size_t probes_held();  // probes the cache still holds (recorded or derived)
  int64_t lookups() const { return lookups_; }
  void count_lookup() { ++lookups_; }  // a point replays what a prefetch asked for
  double record_seconds() const;  // time spent recording, summed over the recorders
  double recorder_cpu_seconds() const;  // the recorder processes' CPU time since they started
  size_t recorders() const { return recorders_.size(); }
  bool recording_in_processes() const { return in_processes_; }

  // What determines the recorded per-rank step: the config without the keys that only the
  // replay reads (device, chip count, topology, execution, allow_oom, output and logging
  // keys), with the resolved degrees and whether the chip fuses attention (the recorder's
  // only input from the chip). Two configs with equal keys record identical traces.
  static std::string key(const JobConfig& cfg);

 private:
  void recorder_loop(Recorder& recorder);
  // A recording to make, the point that needs it first (kNow: a point being evaluated waits
  // for it) and its entry's key (to move it ahead when a point waits for it early).
  static constexpr int64_t kNow = -1;
  struct Job {
    std::function<void(Recorder&)> run;
    int64_t needed_by = kNow;
    std::string key;
  };
  void enqueue(Job job);
  // Under queue_mu_: where a recording a point waits for goes, after the others a point waits for.
  std::deque<Job>::iterator first_prefetch();
  // The queued recording of entry `key`, if any, made next: a point waits for it now.
  void promote(const std::string& key);
  int64_t needed_by(bool prefetch) const { return prefetch ? prefetch_point_.load() : kNow; }
  std::shared_future<std::shared_ptr<const RecordedStep>> request_recorded(const JobConfig& cfg, bool prefetch);
  using ProbeFuture = std::shared_future<std::shared_ptr<const ProbeRecording>>;
  static std::string probe_key(const JobConfig& cfg);  // every degree of a layout: its key at degree 2
  // The probes, by the key of the layout at degree 2, and who holds each entry: prefetches not
  // yet resized (counted; at zero the entry goes) and lookups (kept, since a lookup is a
  // deeper layer sample or a point not prefetched, which the layout's other points are likely
  // to ask for too: for good, or between begin_points and end_points until no point has looked
  // it up for the lookahead). Shared with the holds requests keep, so that a hold dropped after
  // the cache finds nothing to release.
  struct Probes {
    std::mutex mu;
    std::map<std::string, ProbeFuture> entries;
    std::map<std::string, int64_t> prefetched;
    std::map<std::string, int64_t> pinned;  // key -> the last point that looked it up
    void release(const std::string& key);  // one prefetched use done
  };
  // One prefetched use of a probe, released when dropped: after the resize (or derivation) it
  // was for, or with the request if that never ran.
  struct ProbeHold {
    std::weak_ptr<Probes> probes;
    std::string key;
    ProbeHold(std::weak_ptr<Probes> p, std::string k) : probes(std::move(p)), key(std::move(k)) {}
    ProbeHold(const ProbeHold&) = delete;
    ProbeHold& operator=(const ProbeHold&) = delete;
    ~ProbeHold();
  };
  using Hold = std::shared_ptr<ProbeHold>;  // empty: a lookup's (the entry is kept)
  // k's probe for cfg, noting the use: prefetch, a counted use and its hold; else a lookup's.
  // A dp_replicate 1 probe is derived from its dp_replicate 2 probe, used the same way. *hold
  // must be empty on entry (it is assigned under probes_->mu, where dropping a hold would
  // lock it again).
  ProbeFuture request_probe(const JobConfig& cfg, const std::string& k, bool prefetch, Hold* hold);
  // Under probes_->mu: the use noted; its hold if a prefetch's.
  Hold note_use(const std::string& k, bool prefetch);
  // What a recorder will make with make(recorder), queued.
  template <class T, class Make>
  std::shared_future<std::shared_ptr<const T>> record_later(Make make, int64_t needed_by, std::string key);

  // Resized steps no longer held, kept for the next resize to assign into (a fresh copy
  // of a recording is thousands of small allocations, and as many frees), each with what it
  // holds: a spare resized from the same probe before is only rewritten where sizes follow
  // the degree (ResizeState). A study's points for one layout come one after another (other
  // chip counts), so the spare of each of their probes is at hand.
  struct Spare {
    RecordedStep step;
    ResizeState state;
    int64_t taken = 0;  // Spares::takes when it was last taken
  };
  struct Spares : std::enable_shared_from_this<Spares> {
    static constexpr size_t kKept = 32;  // a few per thread and probe: a point holds three samples
    static constexpr int64_t kRecent = 16;  // takes: a few points' samples on every thread
    std::mutex mu;
    int64_t takes = 0;
    std::vector<std::unique_ptr<Spare>> free;
    // One resized from `plan`'s probe if there is one; the step, and its state to update.
    std::pair<std::shared_ptr<RecordedStep>, ResizeState*> take(const std::shared_ptr<ShardPlan>& plan);
  };
  std::shared_ptr<Spares> spare_ = std::make_shared<Spares>();

  std::mutex map_mu_;  // entries_
  std::map<std::string, std::shared_future<std::shared_ptr<const RecordedStep>>> entries_;
  std::shared_ptr<Probes> probes_ = std::make_shared<Probes>();
  std::atomic<int64_t> recordings_{0}, lookups_{0}, record_ns_{0};
  mutable std::mutex why_mu_;
  std::string first_not_resized_, first_not_derived_;
  std::atomic<int64_t> probe_degree_{3};  // the last probe degree that worked: tried first
  // The recorders' queue: what to record.
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Job> queue_;  // by needed_by, kNow first
  int64_t lookahead_ = 0;   // 0: no bound (outside begin_points .. end_points)
  int64_t evaluating_ = 0;  // the latest point whose evaluation started
  std::map<std::thread::id, int64_t> evaluating_by_thread_;  // each thread's point
  std::atomic<int64_t> prefetch_point_{kNow};
  bool stop_ = false;
  std::vector<std::unique_ptr<Recorder>> recorders_;
  bool in_processes_ = false;
  std::vector<std::thread> threads_;  // one per recorder
};

}  // namespace titan::study
