// Chrome trace-event export (see chrome_trace.h).
#include "trainer/simulate/chrome_trace.h"

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace titan {

std::string chrome_trace_json(const devices::StepReport& report, const std::string& title) {
  TITAN_CHECK(!report.events.empty(), "chrome trace: the step report holds no timeline events");
  nlohmann::json events = nlohmann::json::array();
  // Tracks: host dispatch, compute, then one per collective kind and group in first-use order.
  std::map<std::string, int> tid;
  auto track = [&](const std::string& name) {
    auto it = tid.find(name);
    if (it != tid.end()) return it->second;
    const int id = static_cast<int>(tid.size()) + 1;
    tid[name] = id;
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", id}, {"args", {{"name", name}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", 0}, {"tid", id}, {"args", {{"sort_index", id}}}});
    return id;
  };
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", {{"name", title}}}});
  track("host dispatch");
  track("compute");
  for (const auto& e : report.events) {
    std::string name = e.category, where;
    switch (e.kind) {
      case devices::StreamKind::kHost: where = "host dispatch", name = "dispatch"; break;
      case devices::StreamKind::kCompute: where = "compute"; break;
      case devices::StreamKind::kCommunication: where = e.category + " (" + e.stream + " stream)"; break;
    }
    if (e.end_s <= e.start_s) continue;
    events.push_back({{"ph", "X"}, {"name", name}, {"cat", e.stream}, {"pid", 0}, {"tid", track(where)},
                      {"ts", e.start_s * 1e6}, {"dur", (e.end_s - e.start_s) * 1e6}});
  }
  nlohmann::json j;
  j["traceEvents"] = events;
  j["displayTimeUnit"] = "ms";
  j["otherData"] = {{"title", title}, {"device", report.device}, {"layout", report.layout},
                    {"collective_mode", report.collective_mode}, {"execution", report.execution},
                    {"step_time_s", report.step_time_s}};
  return j.dump();
}

std::string pipeline_chrome_trace_json(const RecordedPipeline& rec, const PipelineReplayReport& replay,
                                       const std::string& title) {
  TITAN_CHECK(replay.timing.size() == rec.ranks.size(), "chrome trace: pipeline timing for ", replay.timing.size(),
              " ranks, recorded ", rec.ranks.size());
  enum Track { kCompute = 1, kP2P = 2, kBubble = 3 };
  nlohmann::json events = nlohmann::json::array();
  const double makespan = replay.report.step_time_s;
  auto x = [&](int pid, int tid, const std::string& name, const char* cat, double start, double end,
               nlohmann::json args) {
    if (end <= start) return;
    nlohmann::json e = {{"ph", "X"}, {"name", name}, {"cat", cat}, {"pid", pid}, {"tid", tid},
                        {"ts", start * 1e6}, {"dur", (end - start) * 1e6}};
    if (!args.is_null()) e["args"] = std::move(args);
    events.push_back(std::move(e));
  };
  for (size_t r = 0; r < rec.ranks.size(); ++r) {
    const int pid = static_cast<int>(r);
    std::string stages;
    for (int s : rec.schedule.stages_of(pid)) stages += (stages.empty() ? "" : ", ") + std::to_string(s);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid},
                      {"args", {{"name", "pipeline rank " + std::to_string(r) + " (stages " + stages + ")"}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
    for (auto [tid, name] : {std::pair{kCompute, "compute"}, {kP2P, "send/recv pp"}, {kBubble, "bubble (not computing)"}}) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
      events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", tid},
                        {"args", {{"sort_index", tid}}}});
    }
    TITAN_CHECK(replay.timing[r].size() == rec.program[r].size(), "chrome trace: pipeline rank ", r, " timed ",
                replay.timing[r].size(), " segments, replayed ", rec.program[r].size());
    // The rank's compute intervals in time order; the gaps between them (and to the
    // makespan) are its bubble.
    std::vector<std::pair<double, double>> busy;
    for (size_t i = 0; i < rec.program[r].size(); ++i) {
      const ReplayedSegment& p = rec.program[r][i];
      const PipelineSegment& seg = rec.ranks[r][p.segment];
      const devices::PipeTiming& t = replay.timing[r][i];
      if (seg.is_action && seg.action.p2p()) {
        x(pid, kP2P, p.action.to_string(), "p2p", t.start_s, t.end_s, {{"bytes", seg.p2p_bytes}, {"run", p.run}});
        continue;
      }
      const std::string name = seg.is_action ? p.action.to_string() : "outside the schedule";
      nlohmann::json args = seg.is_action ? nlohmann::json{{"stage", p.action.stage},
                                                           {"microbatch", p.action.microbatch},
                                                           {"run", p.run}}
                                          : nlohmann::json{{"run", p.run}};
      x(pid, kCompute, name, "compute", t.start_s, t.end_s, std::move(args));
      if (t.end_s > t.start_s) busy.emplace_back(t.start_s, t.end_s);
    }
    std::sort(busy.begin(), busy.end());
    double free_from = 0;
    for (const auto& [start, end] : busy) {
      x(pid, kBubble, "bubble", "bubble", free_from, start, nullptr);
      free_from = std::max(free_from, end);
    }
    x(pid, kBubble, "bubble", "bubble", free_from, makespan, nullptr);
  }
  nlohmann::json j;
  j["traceEvents"] = std::move(events);
  j["displayTimeUnit"] = "ms";
  j["otherData"] = {{"title", title}, {"schedule", rec.schedule.name}, {"stages", rec.schedule.num_stages},
                    {"microbatches", rec.schedule.num_microbatches}, {"device", replay.report.device},
                    {"collective_mode", replay.report.collective_mode}, {"step_time_s", makespan},
                    {"bubble_fraction", replay.bubble_fraction}};
  return j.dump();
}

std::string step_trace_json(const JobConfig& cfg, const RecordedStep& rec, const devices::ChipSpec& chip,
                            const devices::Placement& placement, const std::string& title) {
  const ReplayFigures f = replay_figures(cfg, rec, chip, placement, /*keep_events=*/true);
  if (!f.pipeline) return chrome_trace_json(f.report, title);
  return pipeline_chrome_trace_json(*f.pipeline_structure,
                                    compose_pipeline_step(*f.pipeline_structure, f.segment_costs, f.options), title);
}

std::string write_trace_file(const std::string& path, const std::string& json) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path);
  TITAN_CHECK(f.good(), "cannot write the trace file ", path);
  f << json << "\n";
  TITAN_CHECK(f.good(), "cannot write the trace file ", path);
  return path;
}

std::string write_chrome_trace(const std::string& path, const devices::StepReport& report, const std::string& title) {
  return write_trace_file(path, chrome_trace_json(report, title));
}

std::string traces_folder(const JobConfig& cfg) {
  return (std::filesystem::path(cfg.job.dump_folder) / cfg.profiling.save_traces_folder).string();
}

}  // namespace titan
