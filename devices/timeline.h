// Timeline: a discrete-event simulator of in-order streams (the host's dispatch, one compute
// stream, any number of communication streams) with cross-stream dependencies, links that
// concurrent collectives share max-min fairly, and compute slowed while communication runs;
// used by step_simulator.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "devices/interned_name.h"

namespace titan::devices {

enum class StreamKind { kCompute, kCommunication, kHost };

// A task's default overhead category ("launch overhead"), interned once.
const InternedName& launch_overhead_category();

struct TimelineTask {
  int stream = 0;
  double duration_s = 0;         // alone on the device, at full speed
  double ready_s = 0;            // cannot start before (e.g. when the host dispatched it)
  std::vector<int64_t> deps;     // ids of earlier tasks that must finish first
  InternedName category;         // for the cost breakdown ("matmul", "all_gather dp_shard")
  double overhead_s = 0;         // part of duration_s counted as overhead_category
  InternedName overhead_category = launch_overhead_category();
  // Communication: the last `shared_s` of duration_s moves bytes over `links` (ids of
  // physical links, e.g. a torus axis); tasks running on a common link share it max-min
  // fairly, so two collectives alone on one link each progress at half speed.
  double shared_s = 0;
  std::vector<int> links;
  // Compute: the fraction of its speed the task keeps while a communication task runs
  // (GPU collectives take SMs and HBM bandwidth from the kernels they overlap).
  double rate_under_comm = 1;
  // What the task's time rests on, as the caller numbers it (the step simulator's CostBasis
  // and its communication bases; -1: none): the summary adds up each basis's share of the
  // step. A compute task's overhead_s goes to `overhead_basis`, and the time it lost to
  // communication running beside it to `slowdown_basis`.
  int basis = -1, overhead_basis = -1, slowdown_basis = -1;

  // Every field back to its default above, the vectors keeping their room (a replay fills
  // one task per kernel and collective). Field by field: moving a default task in zeroed the
  // whole task with a `rep stos` first, about a fiftieth of a study's CPU.
  void reset() {
    static const TimelineTask kDefault;
    stream = kDefault.stream;
    duration_s = kDefault.duration_s, ready_s = kDefault.ready_s;
    deps.clear();
    category = kDefault.category;
    overhead_s = kDefault.overhead_s;
    overhead_category = kDefault.overhead_category;
    shared_s = kDefault.shared_s;
    links.clear();
    rate_under_comm = kDefault.rate_under_comm;
    basis = kDefault.basis, overhead_basis = kDefault.overhead_basis, slowdown_basis = kDefault.slowdown_basis;
  }
};
static_assert(sizeof(TimelineTask) == 128, "TimelineTask changed: reset the new field in reset()");

struct TaskTiming {
  double start_s = 0;
  double end_s = 0;
};

// One task as it ran, for timeline traces (Chrome trace-event export).
struct TimelineEvent {
  std::string stream;
  StreamKind kind = StreamKind::kCompute;
  std::string category;
  double start_s = 0, end_s = 0;
};

struct StreamBusy {
  std::string name;
  bool communication = false;
  double busy_s = 0;
};

struct TimelineSummary {
  double makespan_s = 0;
  double compute_busy_s = 0;         // union of compute-stream busy time
  double comm_busy_s = 0;            // union of communication-stream busy time
  double exposed_comm_s = 0;         // communication while no compute runs
  double exposed_comm_fraction = 0;  // exposed_comm_s / makespan_s
  double idle_s = 0;                 // neither computing nor communicating (host bound)
  std::vector<StreamBusy> streams;   // device streams (not the host's)
  // Device busy seconds per category (launch overhead split out; time lost to shared links
  // and to communication slowing compute as their own categories), largest first.
  std::vector<std::pair<std::string, double>> categories;
  // Per basis (TimelineTask::basis): seconds of the step it accounts for. Compute tasks: their
  // duration (overhead part under overhead_basis), the slowdown under slowdown_basis. Communication
  // tasks: the part no compute overlaps (exposed), per basis without double counting.
  std::vector<double> basis_s;
};

// Streams execute their tasks in the order added (CUDA-stream / TPU-queue semantics). A task
// starts once its stream is free, every dependency has ended and ready_s has passed. Tasks
// are added in program order and depend only on earlier tasks. Timings are computed on
// demand (timing, summarize) by one event-driven pass: O(tasks x streams).
//
// A task is stored without vectors or strings of its own (a replay adds thousands): its
// dependencies and links in one flat table each, its categories as ids of a table of the
// names seen, so adding a task allocates nothing once the tables have grown.
class Timeline {
 public:
  // A timeline takes its task tables from the last one destroyed on its thread, and gives
  // them back, emptied: a study replays thousands of steps a thread, each adding thousands of
  // tasks, and would otherwise allocate and free the same large tables every time.
  Timeline();
  ~Timeline();
  Timeline(const Timeline&) = default;
  Timeline& operator=(const Timeline&) = default;

  int add_stream(const std::string& name, bool communication);
  int add_stream(const std::string& name, StreamKind kind);
  int64_t add(const TimelineTask& task);  // copied in: the caller may reuse its task
  void reserve(size_t tasks);
  const TaskTiming& timing(int64_t id) const;
  int64_t size() const { return static_cast<int64_t>(tasks_.size()); }
  TimelineSummary summarize() const;  // O(n log n) in the number of tasks
  double makespan() const;  // summarize().makespan_s alone: the last device task's end
  std::vector<TimelineEvent> events() const;  // every task, in the order added
  // f(kind, category, start_s, end_s) for every task in the order added: what events()
  // holds, without copying a name per task.
  template <class F>
  void for_each_event(F&& f) const {
    if (dirty_) run();
    for (size_t i = 0; i < tasks_.size(); ++i)
      f(streams_[static_cast<size_t>(tasks_[i].stream)].kind, categories_[tasks_[i].category],
        timings_[i].start_s, timings_[i].end_s);
  }

 private:
  void run() const;
  struct Tables;  // a thread's spare tables
  static Tables& spare_tables();
  void swap_tables(Tables& spare);
  uint32_t intern(const InternedName& name, uint32_t* hint);

  struct Stream {
    std::string name;
    StreamKind kind = StreamKind::kCompute;
    std::vector<int64_t> tasks;
    // The category ids its last task interned: a stream's tasks come in runs of one category
    // (the host's have none), where one hint for all streams would miss at every task.
    uint32_t category_hint = 0, overhead_hint = 0;
  };
  // TimelineTask as stored: deps_[deps_begin, deps_end), links_[links_begin, links_end),
  // categories_[category].
  struct Task {
    int stream = 0;
    double duration_s = 0, ready_s = 0, overhead_s = 0, shared_s = 0, rate_under_comm = 1;
    int basis = -1, overhead_basis = -1, slowdown_basis = -1;
    uint32_t category = 0, overhead_category = 0;
    uint32_t deps_begin = 0, deps_end = 0, links_begin = 0, links_end = 0;
  };
  std::vector<Stream> streams_;
  std::vector<Task> tasks_;
  std::vector<int64_t> deps_;
  std::vector<int> links_;
  std::vector<InternedName> categories_;  // interned: told apart by address
  mutable std::vector<TaskTiming> timings_;
  mutable bool dirty_ = false;
};

}  // namespace titan::devices
