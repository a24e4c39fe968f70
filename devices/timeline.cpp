#include "devices/timeline.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "common/error.h"
#include "devices/fair_rates.h"

namespace titan::devices {

const InternedName& launch_overhead_category() {
  static const InternedName name("launch overhead");
  return name;
}

namespace {

using Intervals = std::vector<std::pair<double, double>>;

// Sorted, disjoint union of intervals.
Intervals merge(Intervals v) {
  // One stream's tasks come in order: already sorted, and a sort would still cost n log n.
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second)
      out.back().second = std::max(out.back().second, iv.second);
    else
      out.push_back(iv);
  }
  return out;
}

double length(const Intervals& v) {
  double s = 0;
  for (const auto& iv : v) s += iv.second - iv.first;
  return s;
}

// Length of (a minus b), both sorted and disjoint.
double minus_length(const Intervals& a, const Intervals& b) {
  double total = 0;
  size_t j = 0;
  for (const auto& iv : a) {
    double cur = iv.first;
    while (j < b.size() && b[j].second <= cur) ++j;
    size_t k = j;
    while (cur < iv.second) {
      if (k >= b.size() || b[k].first >= iv.second) {
        total += iv.second - cur;
        break;
      }
      if (b[k].first > cur) total += b[k].first - cur;
      cur = std::max(cur, b[k].second);
      ++k;
    }
  }
  return total;
}

}  // namespace

int Timeline::add_stream(const std::string& name, bool communication) {
  return add_stream(name, communication ? StreamKind::kCommunication : StreamKind::kCompute);
}

int Timeline::add_stream(const std::string& name, StreamKind kind) {
  Stream s;
  s.name = name;
  s.kind = kind;
  streams_.push_back(s);
  return static_cast<int>(streams_.size()) - 1;
}

struct Timeline::Tables {
  std::vector<Task> tasks;
  std::vector<int64_t> deps;
  std::vector<int> links;
  std::vector<TaskTiming> timings;
  ~Tables();
};

namespace {
thread_local bool tables_gone = false;  // the thread's spare is destroyed (thread exit)
}  // namespace

Timeline::Tables::~Tables() { tables_gone = true; }

Timeline::Tables& Timeline::spare_tables() {
  static thread_local Tables spare;
  return spare;
}

void Timeline::swap_tables(Tables& spare) {
  tasks_.swap(spare.tasks);
  deps_.swap(spare.deps);
  links_.swap(spare.links);
  timings_.swap(spare.timings);
}

Timeline::Timeline() {
  if (!tables_gone) swap_tables(spare_tables());
}

Timeline::~Timeline() {
  if (tables_gone) return;
  tasks_.clear();
  deps_.clear();
  links_.clear();
  timings_.clear();
  // Keep the larger tables (a spare taken by an earlier timeline still alive is empty).
  if (tasks_.capacity() >= spare_tables().tasks.capacity()) swap_tables(spare_tables());
}

void Timeline::reserve(size_t tasks) {
  tasks_.reserve(tasks);
  deps_.reserve(2 * tasks);
}

uint32_t Timeline::intern(const InternedName& name, uint32_t* hint) {
  // A handful of names, runs of tasks sharing one: the last hit first, then a scan (interned
  // names compare by address).
  if (*hint < categories_.size() && categories_[*hint] == name) return *hint;
  for (uint32_t i = 0; i < categories_.size(); ++i)
    if (categories_[i] == name) return *hint = i;
  categories_.push_back(name);
  return *hint = static_cast<uint32_t>(categories_.size() - 1);
}

int64_t Timeline::add(const TimelineTask& task) {
  TITAN_CHECK(task.stream >= 0 && task.stream < static_cast<int>(streams_.size()),
              "timeline task on unknown stream ", task.stream);
  TITAN_CHECK(task.duration_s >= 0, "negative task duration ", task.duration_s);
  TITAN_CHECK(task.shared_s >= 0 && task.shared_s <= task.duration_s,
              "shared part ", task.shared_s, " outside the task's duration ", task.duration_s);
  TITAN_CHECK(task.rate_under_comm > 0 && task.rate_under_comm <= 1,
              "rate under communication must be in (0, 1], got ", task.rate_under_comm);
  const int64_t id = static_cast<int64_t>(tasks_.size());
  for (int64_t d : task.deps)
    TITAN_CHECK(d >= 0 && d < id, "task depends on a task not yet added: ", d);
  Task t{task.stream,     task.duration_s,    task.ready_s,       task.overhead_s,
         task.shared_s,   task.rate_under_comm, task.basis,       task.overhead_basis,
         task.slowdown_basis};
  Stream& st = streams_[static_cast<size_t>(task.stream)];
  t.category = intern(task.category, &st.category_hint);
  t.overhead_category = intern(task.overhead_category, &st.overhead_hint);
  t.deps_begin = static_cast<uint32_t>(deps_.size());
  deps_.insert(deps_.end(), task.deps.begin(), task.deps.end());
  t.deps_end = static_cast<uint32_t>(deps_.size());
  t.links_begin = static_cast<uint32_t>(links_.size());
  links_.insert(links_.end(), task.links.begin(), task.links.end());
  t.links_end = static_cast<uint32_t>(links_.size());
  st.tasks.push_back(id);
  tasks_.push_back(t);
  dirty_ = true;
  return id;
}

const TaskTiming& Timeline::timing(int64_t id) const {
  TITAN_CHECK(id >= 0 && id < size(), "no timeline task ", id);
  if (dirty_) run();
  return timings_[static_cast<size_t>(id)];
}

std::vector<TimelineEvent> Timeline::events() const {
  if (dirty_) run();
  std::vector<TimelineEvent> out;
  out.reserve(tasks_.size());
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const Stream& st = streams_[static_cast<size_t>(tasks_[i].stream)];
    out.push_back({st.name, st.kind, categories_[tasks_[i].category], timings_[i].start_s, timings_[i].end_s});
  }
  return out;
}

// Event-driven pass. At most one task runs per stream; between events every running task
// progresses at a constant rate: compute at 1 (or rate_under_comm while a communication
// task runs), a collective's fixed part (launch, latency) at 1, its shared part at its
// max-min fair share of the links it uses. Events: a task ends or moves to its shared part,
// a waiting task's ready time arrives. The lowest unfinished task id can always start (its
// dependencies and stream predecessors have lower ids), so the pass cannot deadlock.
void Timeline::run() const {
  const size_t n = tasks_.size(), ns = streams_.size();
  timings_.assign(n, TaskTiming{});
  std::vector<char> done(n, 0);
  std::vector<size_t> head(ns, 0);
  struct Slot {
    int64_t id = -1;
    double fixed = 0, shared = 0;  // remaining seconds of each part at full speed
  };
  std::vector<Slot> slot(ns);
  // A busy stream's rate: a flow's fair share, 1 for any other (base), a compute task's
  // rate_under_comm while communication runs.
  std::vector<double> rate(ns, 1.0), base(ns, 1.0);
  // Where each stream's next task's dependencies were last found not done (a task's list is
  // read on from there: a dependency once done stays done); kUnread: from its start.
  constexpr uint32_t kUnread = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> deps_from(ns, kUnread);
  std::vector<Flow> flows;
  std::vector<size_t> flow_stream;
  std::vector<double> fair;
  std::vector<std::pair<int, double>> capacity;
  double t = 0;
  size_t finished = 0;
  // The fair shares change only when a communication task starts, reaches its shared part or
  // ends; between those events the last shares hold (most events are compute tasks ending).
  bool flows_changed = true;
  auto startable = [&](size_t s, bool* waits_for_time) {
    *waits_for_time = false;
    if (slot[s].id >= 0 || head[s] >= streams_[s].tasks.size()) return false;
    const Task& k = tasks_[static_cast<size_t>(streams_[s].tasks[head[s]])];
    uint32_t& d = deps_from[s];
    if (d == kUnread) d = k.deps_begin;
    for (; d < k.deps_end; ++d)
      if (!done[static_cast<size_t>(deps_[d])]) return false;
    *waits_for_time = k.ready_s > t;
    return !*waits_for_time;
  };
  auto finish = [&](size_t s, int64_t id) {
    timings_[static_cast<size_t>(id)].end_s = t;
    done[static_cast<size_t>(id)] = 1;
    ++finished;
    ++head[s];
    deps_from[s] = kUnread;
    slot[s] = Slot{};
    if (streams_[s].kind == StreamKind::kCommunication) flows_changed = true;
  };
  bool comm_active = false;
  while (finished < n) {
    // Starting a task changes no dependency; only a task that ends as it starts (no duration)
    // can let a stream already passed over start, so only then is there another pass.
    for (bool ended = true; ended;) {
      ended = false;
      for (size_t s = 0; s < ns; ++s) {
        bool wait = false;
        if (!startable(s, &wait)) continue;
        const int64_t id = streams_[s].tasks[head[s]];
        const Task& k = tasks_[static_cast<size_t>(id)];
        timings_[static_cast<size_t>(id)].start_s = t;
        slot[s] = Slot{id, k.duration_s - k.shared_s, k.shared_s};
        if (streams_[s].kind == StreamKind::kCommunication) flows_changed = true;
        if (k.duration_s <= 0) finish(s, id), ended = true;
      }
    }
    if (finished == n) break;
    if (flows_changed) {
      flows_changed = false;
      comm_active = false;
      flows.clear();
      flow_stream.clear();
      for (size_t s = 0; s < ns; ++s) {
        if (slot[s].id < 0 || streams_[s].kind != StreamKind::kCommunication) continue;
        comm_active = true;
        if (slot[s].fixed <= 0) {
          const Task& k = tasks_[static_cast<size_t>(slot[s].id)];
          flows.emplace_back(links_.data() + k.links_begin, links_.data() + k.links_end);
          flow_stream.push_back(s);
        }
      }
      fair_rates(flows, &fair, &capacity);
      for (size_t s = 0; s < ns; ++s) base[s] = 1.0;
      for (size_t f = 0; f < flows.size(); ++f) base[flow_stream[f]] = fair[f];
    }
    double dt = std::numeric_limits<double>::infinity();
    for (size_t s = 0; s < ns; ++s) {
      if (slot[s].id < 0) {
        bool wait = false;
        startable(s, &wait);
        if (wait) dt = std::min(dt, tasks_[static_cast<size_t>(streams_[s].tasks[head[s]])].ready_s - t);
        continue;
      }
      rate[s] = streams_[s].kind == StreamKind::kCompute && comm_active
                    ? tasks_[static_cast<size_t>(slot[s].id)].rate_under_comm
                    : base[s];
      dt = std::min(dt, (slot[s].fixed > 0 ? slot[s].fixed : slot[s].shared) / rate[s]);
    }
    TITAN_CHECK(dt < std::numeric_limits<double>::infinity(), "timeline: no task can progress");
    t += dt;
    for (size_t s = 0; s < ns; ++s) {
      if (slot[s].id < 0) continue;
      double& rem = slot[s].fixed > 0 ? slot[s].fixed : slot[s].shared;
      // The task(s) that define this event land exactly on zero.
      const bool in_fixed = slot[s].fixed > 0;
      rem = rem <= rate[s] * dt * (1 + 1e-12) ? 0.0 : rem - rate[s] * dt;
      if (slot[s].fixed <= 0 && slot[s].shared <= 0) finish(s, slot[s].id);
      else if (in_fixed && slot[s].fixed <= 0 && streams_[s].kind == StreamKind::kCommunication) flows_changed = true;
    }
  }
  dirty_ = false;
}

double Timeline::makespan() const {
  if (dirty_) run();
  double m = 0;
  for (size_t i = 0; i < tasks_.size(); ++i)
    if (streams_[static_cast<size_t>(tasks_[i].stream)].kind != StreamKind::kHost) m = std::max(m, timings_[i].end_s);
  return m;
}

TimelineSummary Timeline::summarize() const {
  if (dirty_) run();
  TimelineSummary r;
  Intervals compute, comm;
  compute.reserve(tasks_.size());
  std::vector<double> busy(streams_.size(), 0.0);
  // Busy seconds per category by its id; the two the summary adds take the ids of tasks'
  // categories of the same name, else two of their own.
  const uint32_t nc = static_cast<uint32_t>(categories_.size());
  auto id_of = [&](const char* name, uint32_t own) {
    for (uint32_t i = 0; i < nc; ++i)
      if (categories_[i] == name) return i;
    return own;
  };
  static const char* const kShared = "shared links";
  static const char* const kSlowed = "compute slowed by communication";
  const uint32_t shared_id = id_of(kShared, nc), slowed_id = id_of(kSlowed, nc + 1);
  std::vector<double> seconds(nc + 2, 0.0);
  std::vector<char> used(nc + 2, 0);
  auto cat = [&](uint32_t id) -> double& {
    used[id] = 1;
    return seconds[id];
  };
  std::map<int, Intervals> comm_by_basis;
  auto add_basis = [&r](int b, double s) {
    if (b < 0 || s <= 0) return;
    if (static_cast<size_t>(b) >= r.basis_s.size()) r.basis_s.resize(static_cast<size_t>(b) + 1, 0.0);
    r.basis_s[static_cast<size_t>(b)] += s;
  };
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const Task& t = tasks_[i];
    const TaskTiming& tm = timings_[i];
    const Stream& st = streams_[static_cast<size_t>(t.stream)];
    if (st.kind == StreamKind::kHost) continue;
    const double elapsed = tm.end_s - tm.start_s;
    r.makespan_s = std::max(r.makespan_s, tm.end_s);
    busy[static_cast<size_t>(t.stream)] += elapsed;
    (st.kind == StreamKind::kCommunication ? comm : compute).push_back({tm.start_s, tm.end_s});
    double overhead = std::min(t.overhead_s, t.duration_s);
    if (st.kind == StreamKind::kCommunication) {
      if (t.basis >= 0) comm_by_basis[t.basis].push_back({tm.start_s, tm.end_s});
    } else {
      add_basis(t.overhead_basis, overhead);
      add_basis(t.basis, t.duration_s - overhead);
      add_basis(t.slowdown_basis, elapsed - t.duration_s);
    }
    if (overhead > 0) cat(t.overhead_category) += overhead;
    if (t.duration_s - overhead > 0) cat(t.category) += t.duration_s - overhead;
    // Slower than alone: links shared with other collectives, or SMs / HBM lent to them.
    if (elapsed > t.duration_s * (1 + 1e-9))
      cat(st.kind == StreamKind::kCommunication ? shared_id : slowed_id) += elapsed - t.duration_s;
  }
  compute = merge(std::move(compute));
  comm = merge(std::move(comm));
  r.compute_busy_s = length(compute);
  r.comm_busy_s = length(comm);
  r.exposed_comm_s = minus_length(comm, compute);
  r.exposed_comm_fraction = r.makespan_s > 0 ? r.exposed_comm_s / r.makespan_s : 0;
  // Exposed time per basis, each stretch counted once: collectives of two bases exposed at the
  // same instant (on two streams) give it to the lower-numbered basis, so the bases add up to
  // exposed_comm_s instead of exceeding it.
  Intervals covered = compute;
  for (auto& [b, iv] : comm_by_basis) {
    Intervals mine = merge(std::move(iv));
    add_basis(b, minus_length(mine, covered));
    covered.insert(covered.end(), mine.begin(), mine.end());
    covered = merge(std::move(covered));
  }
  r.idle_s = std::max(0.0, r.makespan_s - r.compute_busy_s - r.exposed_comm_s);
  for (size_t s = 0; s < streams_.size(); ++s)
    if (streams_[s].kind != StreamKind::kHost)
      r.streams.push_back({streams_[s].name, streams_[s].kind == StreamKind::kCommunication,
                           busy[s]});
  // In name order first (names are unique), as a std::map would give them.
  std::vector<std::pair<std::string, double>> cats;
  for (uint32_t i = 0; i < nc + 2; ++i)
    if (used[i]) cats.emplace_back(i < nc ? categories_[i] : i == nc ? kShared : kSlowed, seconds[i]);
  std::sort(cats.begin(), cats.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  r.categories = std::move(cats);
  std::stable_sort(r.categories.begin(), r.categories.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return r;
}

}  // namespace titan::devices
