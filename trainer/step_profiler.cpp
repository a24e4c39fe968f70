// Real-step Chrome traces (see step_profiler.h).
#include "trainer/step_profiler.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "common/error.h"
#include "trainer/config/config_folders.h"
#include "trainer/simulate/chrome_trace.h"

namespace titan {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Event {
  std::string name, category, args;  // args: a JSON object's text, or ""
  uint64_t thread = 0;
  int64_t start_ns = 0, end_ns = 0;
};

// What on_enter captured: inputs are only valid inside the start callback.
struct Open : at::ObserverContext {
  int64_t start_ns = 0;
  std::string args;
};

// One profiled step's events, filled by the callbacks from every thread.
std::mutex events_mu;
std::vector<Event>* collecting = nullptr;

std::string shapes_of(c10::ArrayRef<const c10::IValue> inputs) {
  std::ostringstream s;
  s << "[";
  bool first = true;
  for (const auto& v : inputs) {
    if (!v.isTensor()) continue;
    const auto& t = v.toTensor();
    if (!first) s << ",";
    first = false;
    s << "[";
    if (t.defined()) {
      for (int64_t d = 0; d < t.dim(); ++d) s << (d ? "," : "") << t.size(d);
    }
    s << "]";
  }
  s << "]";
  return s.str();
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  auto o = std::make_unique<Open>();
  const char* name = fn.name();
  const auto in = fn.inputs();
  if (std::strncmp(name, kCollectiveScopePrefix, std::strlen(kCollectiveScopePrefix)) == 0 && in.size() == 2 &&
      in[0].isString() && in[1].isInt()) {
    nlohmann::json a = {{"group", in[0].toStringRef()}, {"bytes", in[1].toInt()}};
    o->args = a.dump();
  } else if (fn.scope() == at::RecordScope::FUNCTION && !in.empty()) {
    o->args = "{\"input_shapes\":" + shapes_of(in) + "}";
  }
  o->start_ns = now_ns();
  return o;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  auto* o = static_cast<Open*>(ctx);
  if (!o) return;
  Event e;
  e.end_ns = now_ns();
  e.start_ns = o->start_ns;
  e.name = fn.name();
  e.thread = fn.threadId();
  e.args = std::move(o->args);
  switch (fn.scope()) {
    case at::RecordScope::BACKWARD_FUNCTION: e.category = "autograd"; break;
    case at::RecordScope::USER_SCOPE:
      e.category = e.name.rfind(kCollectiveScopePrefix, 0) == 0 ? "collective" : "user";
      break;
    default: e.category = "aten"; break;
  }
  std::lock_guard<std::mutex> lock(events_mu);
  if (collecting) collecting->push_back(std::move(e));
}

// Every rank's bytes on every rank (rank order): sizes first, then the padded payloads.
std::vector<std::string> all_gather_strings(Communicator* world, const std::string& mine) {
  const int n = world->size();
  auto sizes = at::zeros({n}, at::kLong);
  auto my_size = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
  world->all_gather(sizes, my_size)->wait();
  int64_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, sizes[r].item<int64_t>());
  auto out = at::zeros({n * longest}, at::kByte);
  auto in = at::zeros({longest}, at::kByte);
  std::memcpy(in.data_ptr(), mine.data(), mine.size());
  world->all_gather(out, in)->wait();
  std::vector<std::string> all;
  const char* base = static_cast<const char*>(out.data_ptr());
  for (int r = 0; r < n; ++r) all.emplace_back(base + r * longest, static_cast<size_t>(sizes[r].item<int64_t>()));
  return all;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream f(path);
  f << text << "\n";
  TITAN_CHECK(f.good(), "profiling: cannot write the trace file ", path.string());
}

}  // namespace

struct StepProfiler::State {
  std::vector<Event> events;
  at::CallbackHandle handle = 0;
  bool active = false;
  int64_t t0_ns = 0;
  uint64_t main_thread = 0;
};

StepProfiler::StepProfiler(const JobConfig& cfg, Communicator* world)
    : options_(cfg.profiling), folder_(traces_folder(cfg)), world_(world), state_(std::make_unique<State>()) {
  // At start, not at the first traced step after minutes of training.
  if (options_.enable_profiling) create_folder_for("profiling.save_traces_folder", folder_);
}

StepProfiler::~StepProfiler() {
  if (!state_->active) return;
  at::removeCallback(state_->handle);
  std::lock_guard<std::mutex> lock(events_mu);
  collecting = nullptr;
}

bool StepProfiler::traces(int64_t step) const {
  return options_.enable_profiling && step % options_.profile_freq == 0;
}

void StepProfiler::before_step(int64_t step) {
  if (!traces(step)) return;
  // Ranks leave the barrier together: each rank's zero is the same instant within a
  // barrier's skew, on one host or many. Before `collecting` is set: a barrier that throws
  // must not leave it pointing at this profiler's events after the profiler is gone.
  world_->barrier()->wait();
  {
    std::lock_guard<std::mutex> lock(events_mu);
    TITAN_CHECK(collecting == nullptr, "profiling: another step profiler is recording");
    state_->events.clear();
    collecting = &state_->events;
  }
  state_->t0_ns = now_ns();
  state_->main_thread = at::RecordFunction::currentThreadId();
  state_->handle = at::addGlobalCallback(at::RecordFunctionCallback(&on_enter, &on_exit)
                                             .needsInputs(true)
                                             .scopes({at::RecordScope::FUNCTION,
                                                      at::RecordScope::BACKWARD_FUNCTION,
                                                      at::RecordScope::USER_SCOPE}));
  state_->active = true;
}

std::string StepProfiler::after_step(int64_t step) {
  if (!state_->active) return "";
  at::removeCallback(state_->handle);
  state_->active = false;
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lock(events_mu);
    collecting = nullptr;
    events.swap(state_->events);
  }
  const int rank = world_->global_rank();
  nlohmann::json trace = nlohmann::json::array();
  trace.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  trace.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
  // Tracks: the training thread first, then the others (collective progress threads) in
  // first-use order.
  std::map<uint64_t, int> tid;
  // A communicator's progress thread is named after the group of its first collective.
  auto track = [&](uint64_t thread, const Event* first) {
    auto it = tid.find(thread);
    if (it != tid.end()) return it->second;
    const int id = static_cast<int>(tid.size());
    tid[thread] = id;
    std::string name = "thread " + std::to_string(id);
    if (thread == state_->main_thread) {
      name = "training thread";
    } else if (first && first->category == "collective" && !first->args.empty()) {
      name = "collectives " + nlohmann::json::parse(first->args).value("group", std::string("?")) + " (thread " +
             std::to_string(id) + ")";
    }
    trace.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", id}, {"args", {{"name", name}}}});
    trace.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", rank}, {"tid", id}, {"args", {{"sort_index", id}}}});
    return id;
  };
  track(state_->main_thread, nullptr);
  // Callbacks append at the end of each op: sorting by start puts parents before children.
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.start_ns < b.start_ns; });
  for (const auto& e : events) {
    nlohmann::json ev = {{"ph", "X"}, {"name", e.name}, {"cat", e.category}, {"pid", rank},
                         {"tid", track(e.thread, &e)}, {"ts", (e.start_ns - state_->t0_ns) / 1e3},
                         {"dur", (e.end_ns - e.start_ns) / 1e3}};
    if (!e.args.empty()) ev["args"] = nlohmann::json::parse(e.args);
    trace.push_back(std::move(ev));
  }
  nlohmann::json mine;
  mine["traceEvents"] = std::move(trace);
  mine["displayTimeUnit"] = "ms";
  mine["otherData"] = {{"step", step}, {"rank", rank}, {"world_size", world_->size()}};
  const std::string text = mine.dump();
  const std::filesystem::path dir = std::filesystem::path(folder_) / ("iteration_" + std::to_string(step));
  write_file(dir / ("rank" + std::to_string(rank) + "_trace.json"), text);
  // The merged trace is gathered through the collectives, not read from the other ranks'
  // files, so that it needs no shared file system across hosts.
  const std::vector<std::string> all = all_gather_strings(world_, text);
  if (rank != 0) return "";
  nlohmann::json merged;
  merged["traceEvents"] = nlohmann::json::array();
  for (const auto& s : all) {
    nlohmann::json rank_trace = nlohmann::json::parse(s);
    for (auto& ev : rank_trace["traceEvents"]) merged["traceEvents"].push_back(std::move(ev));
  }
  merged["displayTimeUnit"] = "ms";
  merged["otherData"] = {{"step", step}, {"world_size", world_->size()},
                         {"clock", "each rank's zero is the end of a barrier before the step"}};
  const auto path = dir / "trace.json";
  write_file(path, merged.dump());
  return path.string();
}

}  // namespace titan
