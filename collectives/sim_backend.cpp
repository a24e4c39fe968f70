// The `sim` backend (see sim_backend.h): communicators that record instead of moving data.
#include "collectives/sim_backend.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/backend.h"
#include "common/error.h"

namespace titan {

namespace {

struct SimState {
  std::mutex mu;
  SimListener listener;
  int64_t world_size = 1;
  int64_t rank = 0;
  int64_t next_id = 0;
};

SimState& state() {
  static SimState s;
  return s;
}

void emit(const SimCollectiveEvent& e) {
  SimListener l;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    l = state().listener;
  }
  if (l) l(e);
}

int64_t nbytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// Waiting on it reports a wait for every flat collective of the call, once.
class SimWork : public Work {
 public:
  explicit SimWork(std::vector<int64_t> ids) : ids_(std::move(ids)) {}
  void wait() override {
    if (waited_) return;
    waited_ = true;
    for (int64_t id : ids_) {
      SimCollectiveEvent e;
      e.type = SimCollectiveEvent::Type::kWait;
      e.id = id;
      emit(e);
    }
  }
  bool is_done() const override { return true; }

 private:
  std::vector<int64_t> ids_;
  bool waited_ = false;
};

class SimCommunicator : public Communicator {
 public:
  SimCommunicator(std::string name, std::vector<int> ranks, int global_rank, CommOptions options)
      : Communicator(std::move(name), std::move(ranks), global_rank, std::move(options)) {
    route_every_op_through_submit();  // every call is recorded, blocking or not
  }
  std::string backend() const override { return "sim"; }

 protected:
  bool accepts(const at::Tensor& t) const override { return t.device().is_cpu() || t.is_meta(); }

  // Runs the call's packing now on this thread (the run_* hooks below record each flat
  // collective it makes) and returns a Work that records the wait. Nothing is queued: the
  // timeline decides what overlaps, from the recorded issue and wait points.
  WorkPtr submit(OpInfo info, std::function<void()> fn) override {
    SimCollectiveEvent call;
    call.type = SimCollectiveEvent::Type::kCall;
    call.op = info.op;
    call.group = name();
    call.group_size = size();
    call.bytes = info.bytes;
    emit(call);
    issued_.clear();
    {
      // Packing into flat buffers belongs to the collective, not to the step's compute.
      at::DisableRecordFunctionGuard no_recording;
      fn();
    }
    return std::make_shared<SimWork>(std::move(issued_));
  }

  void run_all_reduce(const at::Tensor& flat, ReduceOp) override { record("all_reduce", nbytes(flat)); }
  void run_all_gather(const at::Tensor& out, const at::Tensor&) override {
    record("all_gather", nbytes(out));
  }
  void run_reduce_scatter(const at::Tensor&, const at::Tensor& in, ReduceOp) override {
    record("reduce_scatter", nbytes(in));
  }
  void run_broadcast(const at::Tensor& t, int) override { record("broadcast", nbytes(t)); }
  void run_all_to_all(const at::Tensor&, const at::Tensor& in) override {
    record("all_to_all", nbytes(in));
  }
  // Uneven blocks are costed by the larger of what this rank sends and receives: under skewed
  // routing the rank holding hot experts receives more than it sends, and its links carry both.
  // The meta tensors' row counts carry the simulated routing.
  void run_all_to_all_v(const at::Tensor& out, const at::Tensor& in, const std::vector<int64_t>&,
                        const std::vector<int64_t>&) override {
    record("all_to_all", std::max(nbytes(in), nbytes(out)));
  }
  void run_send(const at::Tensor& t, int, int) override { record("send", nbytes(t)); }
  void run_recv(const at::Tensor& t, int, int) override { record("recv", nbytes(t)); }
  void run_barrier() override { record("all_reduce", 0); }

 private:
  void record(const char* op, int64_t bytes) {
    SimCollectiveEvent e;
    e.type = SimCollectiveEvent::Type::kIssue;
    e.op = op;
    e.group = name();
    e.group_size = size();
    e.bytes = bytes;
    // Real runs serialize a communicator's ops on its own progress thread.
    e.stream = name();
    e.async = is_fused(options());
    {
      std::lock_guard<std::mutex> lock(state().mu);
      e.id = state().next_id++;
    }
    issued_.push_back(e.id);
    emit(e);
  }

  std::vector<int64_t> issued_;
};

class SimBackend : public Backend {
 public:
  explicit SimBackend(const CommOptions& options) : options_(options) {
    std::lock_guard<std::mutex> lock(state().mu);
    size_ = state().world_size;
    rank_ = state().rank;
  }
  std::string name() const override { return "sim"; }
  int rank() const override { return static_cast<int>(rank_); }
  int size() const override { return static_cast<int>(size_); }
  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks,
                                          const std::string& name) override {
    return std::make_shared<SimCommunicator>(name, ranks, static_cast<int>(rank_), options_);
  }

 private:
  CommOptions options_;
  int64_t size_ = 1, rank_ = 0;
};

}  // namespace

void set_sim_listener(SimListener listener) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().listener = std::move(listener);
}

int64_t sim_report_host_copy(bool to_host, int64_t bytes) {
  SimCollectiveEvent e;
  e.type = SimCollectiveEvent::Type::kIssue;
  e.op = "host_copy";
  e.group = e.stream = to_host ? "d2h" : "h2d";
  e.bytes = bytes;
  SimListener l;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    if (!state().listener) return -1;
    l = state().listener;
    e.id = state().next_id++;
  }
  l(e);
  return e.id;
}

void sim_report_wait(int64_t id) {
  if (id < 0) return;
  SimCollectiveEvent e;
  e.type = SimCollectiveEvent::Type::kWait;
  e.id = id;
  emit(e);
}

void set_sim_world(int64_t size, int64_t rank) {
  TITAN_CONFIG_CHECK(size >= 1 && size <= (int64_t{1} << 30), "simulation: world size ", size,
                     " out of range");
  TITAN_CONFIG_CHECK(rank >= 0 && rank < size, "simulation: representative rank ", rank,
                     " outside [0, ", size, ")");
  std::lock_guard<std::mutex> lock(state().mu);
  state().world_size = size;
  state().rank = rank;
}

void register_sim_backend() {
  register_backend("sim", [](const CommOptions& o) { return std::make_unique<SimBackend>(o); });
}

}  // namespace titan
