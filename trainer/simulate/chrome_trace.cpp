// Chrome trace-event export (see chrome_trace.h).
#include "trainer/simulate/chrome_trace.h"

#include <filesystem>
#include <fstream>
#include <map>

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

std::string write_chrome_trace(const std::string& path, const devices::StepReport& report, const std::string& title) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path);
  TITAN_CHECK(f.good(), "cannot write the trace file ", path);
  f << chrome_trace_json(report, title) << "\n";
  TITAN_CHECK(f.good(), "cannot write the trace file ", path);
  return path;
}

std::string traces_folder(const JobConfig& cfg) {
  return (std::filesystem::path(cfg.job.dump_folder) / cfg.profiling.save_traces_folder).string();
}

}  // namespace titan
