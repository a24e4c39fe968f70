// TraceRecorder (see trace_recorder.h): installs the RecordFunction callbacks
// (recorder_callbacks.cpp: aten calls -> devices::OpDesc) and turns sim collectives into
// Trace issue/wait points.
#include "trainer/simulate/trace_recorder.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <mutex>

#include "common/error.h"
#include "devices/fused_ops.h"
#include "parallel/context_parallel.h"
#include "parallel/storage_listener.h"
#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/model/kernels/meta_kernel.h"
#include "trainer/simulate/block_membership.h"
#include "trainer/simulate/recorder_state.h"
#include "trainer/simulate/storage_ids.h"

namespace titan {

std::string placement_group(const std::string& name) {
  // DeviceMesh flattens dp_shard x cp into "fsdp" (alias dp_shard_cp); the placement knows
  // the alias.
  if (name == "fsdp") return "dp_shard_cp";
  return name;
}

RecordOptions record_options(const devices::ChipSpec& chip) {
  return RecordOptions(chip.fused_attention, chip.host_fused_kernels);
}

RecordOptions record_options(const devices::ChipSpec& chip, devices::ExecutionMode execution) {
  RecordOptions o = record_options(chip);
  o.fused_cross_entropy = devices::compiles_whole_step(chip, execution);
  return o;
}

int64_t recorded_issue_count() {
  std::lock_guard<std::mutex> lock(recorder_state::mu);
  if (!recorder_state::active) return -1;
  const auto& ev = recorder_state::active->trace().events();
  return std::count_if(ev.begin(), ev.end(),
                       [](const devices::TraceEvent& e) { return e.type == devices::TraceEvent::Type::kIssue; });
}

int64_t recorded_storage_id(const at::Tensor& t) { return known_storage_id(t); }

namespace {
size_t events_hint = 0;  // events of the longest trace finished (guarded by recorder_state::mu)
}  // namespace

TraceRecorder::TraceRecorder(const RecordOptions& options) {
  // As many events as the longest recording so far had: a trace grows without moving its
  // events (a few hundred bytes each) from buffer to buffer as it doubles (untouched room
  // costs no memory until written). Reserved before this recorder becomes the active one, so a failed
  // allocation leaves no recorder active.
  {
    std::lock_guard<std::mutex> lock(recorder_state::mu);
    trace_.reserve(events_hint);
    TITAN_CHECK(recorder_state::active == nullptr, "TraceRecorder: another recorder is active");
    recorder_state::active = this;
    recorder_state::fuse_attention_scope = options.fuse_attention;
    // TITAN_META_STAND_INS=0: every kept scope runs its composite ops on the meta device, as
    // before the stand-ins (the recording is the same: for checking that it is).
    const char* env = std::getenv("TITAN_META_STAND_INS");
    const bool stand_ins = !(env && std::string(env) == "0");
    set_meta_records_attention_kernel(options.fuse_attention && stand_ins);
    set_meta_ring_blocks_kept(options.fuse_attention && stand_ins);
    recorder_state::fuse_kernel_scopes = options.fused_kernels;
    set_meta_records_fused_kernels(options.fused_kernels);
    recorder_state::fuse_cross_entropy_scope = options.fused_cross_entropy;
    recorder_state::fuse_grouped_matmul_scope = options.grouped_matmul;
    set_meta_records_grouped_matmul_kernel(options.grouped_matmul && stand_ins);
    set_meta_records_fused_cross_entropy(options.fused_cross_entropy);
    recorder_state::intervals.clear();
    block_membership::reset();
    recorder_state::unseen_grads_writer = -1;
  }
  forget_storages();
  set_sim_listener([this](const SimCollectiveEvent& e) { add_collective(e); });
  set_storage_resize_listener([this](const at::Tensor& t, int64_t nbytes) {
    const int64_t id = storage_id(t);
    std::lock_guard<std::mutex> lock(recorder_state::mu);
    trace_.storage_resizes().push_back({static_cast<int64_t>(trace_.compute_ops()), id, nbytes});
  });
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&recorder_state::on_enter, &recorder_state::on_exit)
                                      .needsInputs(true)
                                      .needsOutputs(true)
                                      .scopes({at::RecordScope::FUNCTION,
                                               at::RecordScope::BACKWARD_FUNCTION,
                                               at::RecordScope::USER_SCOPE}));
}

TraceRecorder::~TraceRecorder() {
  at::removeCallback(handle_);
  set_sim_listener(nullptr);
  set_storage_resize_listener(nullptr);
  forget_storages();
  std::lock_guard<std::mutex> lock(recorder_state::mu);
  recorder_state::active = nullptr;
  set_meta_records_fused_kernels(false);
  set_meta_records_fused_cross_entropy(false);
  set_meta_records_attention_kernel(false);
  set_meta_records_grouped_matmul_kernel(false);
  set_meta_ring_blocks_kept(false);
  recorder_state::intervals.clear();
  block_membership::reset();
}

const devices::Trace& TraceRecorder::finish() {
  {
    std::lock_guard<std::mutex> lock(recorder_state::mu);
    events_hint = std::max(events_hint, trace_.size());
    if (!late_writes_.empty()) trace_.add_writes(std::move(late_writes_));
    late_writes_.clear();
  }
  trace_.storages() = storage_table();
  return trace_;
}

std::vector<devices::TraceEvent> TraceRecorder::take_events() {
  std::lock_guard<std::mutex> lock(recorder_state::mu);
  return trace_.take_events();
}

devices::Trace TraceRecorder::take_trace() {
  std::lock_guard<std::mutex> lock(recorder_state::mu);
  devices::Trace out = std::move(trace_);
  trace_ = devices::Trace();
  return out;
}

std::map<std::string, int64_t> TraceRecorder::op_counts() const {
  std::map<std::string, int64_t> out;
  for (const auto& [name, n] : counts_) out[*name] += n;
  return out;
}

// Called with `recorder_state::mu` held.
void TraceRecorder::add_late_write(int64_t op, const devices::TensorUse& use) { late_writes_.push_back({op, use}); }

// Called with `recorder_state::mu` held.
void TraceRecorder::add_compute(devices::OpDesc&& op) {
  counts_[&op.name.str()]++;
  trace_.compute(std::move(op));
}

void TraceRecorder::add_collective(const SimCollectiveEvent& e) {
  std::lock_guard<std::mutex> lock(recorder_state::mu);
  switch (e.type) {
    case SimCollectiveEvent::Type::kCall:
      calls_.push_back(e);
      break;
    case SimCollectiveEvent::Type::kIssue: {
      devices::CollectiveDesc c;
      c.kind = devices::parse_collective(e.op);
      c.group = placement_group(e.group);
      c.bytes = e.bytes;
      c.stream = e.stream;
      work_of_[e.id] = trace_.issue(c);
      break;
    }
    case SimCollectiveEvent::Type::kWait: {
      auto it = work_of_.find(e.id);
      if (it != work_of_.end()) trace_.wait(it->second);
      break;
    }
  }
}

}  // namespace titan
