#include "devices/timeline.h"

#include <algorithm>
#include <map>

#include "common/error.h"

namespace titan::devices {
namespace {

using Intervals = std::vector<std::pair<double, double>>;

// Sorted, disjoint union of intervals.
Intervals merge(Intervals v) {
  std::sort(v.begin(), v.end());
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
  Stream s;
  s.name = name;
  s.communication = communication;
  streams_.push_back(s);
  return static_cast<int>(streams_.size()) - 1;
}

int64_t Timeline::add(const TimelineTask& task) {
  TITAN_CHECK(task.stream >= 0 && task.stream < static_cast<int>(streams_.size()),
              "timeline task on unknown stream ", task.stream);
  TITAN_CHECK(task.duration_s >= 0, "negative task duration ", task.duration_s);
  Stream& s = streams_[static_cast<size_t>(task.stream)];
  double start = std::max(s.free_s, task.ready_s);
  const int64_t id = static_cast<int64_t>(tasks_.size());
  for (int64_t d : task.deps) {
    TITAN_CHECK(d >= 0 && d < id, "task depends on a task not yet added: ", d);
    start = std::max(start, timings_[static_cast<size_t>(d)].end_s);
  }
  TaskTiming t{start, start + task.duration_s};
  s.free_s = t.end_s;
  s.last = id;
  tasks_.push_back(task);
  timings_.push_back(t);
  return id;
}

TimelineSummary Timeline::summarize() const {
  TimelineSummary r;
  Intervals compute, comm;
  std::vector<double> busy(streams_.size(), 0.0);
  std::map<std::string, double> cats;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const TimelineTask& t = tasks_[i];
    const TaskTiming& tm = timings_[i];
    r.makespan_s = std::max(r.makespan_s, tm.end_s);
    busy[static_cast<size_t>(t.stream)] += t.duration_s;
    (streams_[static_cast<size_t>(t.stream)].communication ? comm : compute)
        .push_back({tm.start_s, tm.end_s});
    double overhead = std::min(t.overhead_s, t.duration_s);
    if (overhead > 0) cats[t.overhead_category] += overhead;
    if (t.duration_s - overhead > 0) cats[t.category] += t.duration_s - overhead;
  }
  compute = merge(std::move(compute));
  comm = merge(std::move(comm));
  r.compute_busy_s = length(compute);
  r.comm_busy_s = length(comm);
  r.exposed_comm_s = minus_length(comm, compute);
  r.exposed_comm_fraction = r.makespan_s > 0 ? r.exposed_comm_s / r.makespan_s : 0;
  r.idle_s = std::max(0.0, r.makespan_s - r.compute_busy_s - r.exposed_comm_s);
  for (size_t s = 0; s < streams_.size(); ++s)
    r.streams.push_back({streams_[s].name, streams_[s].communication, busy[s]});
  r.categories.assign(cats.begin(), cats.end());
  std::stable_sort(r.categories.begin(), r.categories.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return r;
}

}  // namespace titan::devices
