// Communicator: one process group (a DeviceMesh dim or a flattened set of dims) and every
// collective on it. Used by the trainer, FSDP/TP/PP/DDP code; implemented by the backends
// (mpi, gloo; a sim backend records the same calls instead of moving data).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/comm_options.h"
#include "collectives/watchdog.h"
#include "collectives/work.h"

namespace titan {

class ProgressThread;

using WorkPtr = std::shared_ptr<Work>;

// Semantics shared by every backend:
// - Tensors live on the CPU (a sim backend also takes meta tensors). Results are written
//   in place into the given tensors; non-contiguous tensors work (through a copy).
// - Every member of the group issues the same ops in the same order (one issuing thread
//   per communicator).
// - all_gather: out.numel() == size() * in.numel(); out holds rank 0's data, then rank 1's...
//   reduce_scatter: in.numel() == size() * out.numel(); rank r gets block r, reduced.
//   all_to_all: in and out have equal numel, divisible by size(); block j of in goes to
//   rank j, block r of out comes from rank r. all_reduce takes any numel.
//   all_to_all_single (all-to-all-v): uneven blocks along dim 0. in_splits[j] rows of in
//   (in order) go to rank j; out_splits[r] rows of out come from rank r. Rows are dim 0 of
//   contiguous tensors whose other dims agree; sum(in_splits) == in.size(0), sum(out_splits)
//   == out.size(0). out_splits must equal what the peers send (exchange the counts first);
//   empty split lists mean equal blocks.
//   Sizes that break these rules fail at issue time with a titan::Error naming group and
//   sizes; sizes that differ between ranks are the caller's bug (undefined).
// - Reductions add in rank order element by element (see reduce_kernels.h), so results
//   do not depend on bucketing: fused and separate modes are bit-identical.
// - dtypes: reductions take float32, float64, bfloat16, int32, int64; data movement any.
// - collective_mode "fused": ops run asynchronously on this communicator's progress thread
//   in issue order, and list ops are coalesced into flat buckets of at most bucket_cap_mb;
//   sends and receives of contiguous tensors are instead posted at issue (MPI_Isend /
//   MPI_Irecv; gloo's unbound-buffer send / recv) and may complete before ops issued ahead of
//   them.
//   "separate": every tensor is its own blocking collective on the calling thread and the
//   returned Work is already complete. Either way wait() before touching the tensors.
// - An op that runs past train_timeout_seconds, or a transport failure (dead peer), ends
//   the whole job with a message naming op, group and rank (see watchdog.h).
class Communicator {
 public:
  Communicator(std::string name, std::vector<int> global_ranks, int global_rank,
               CommOptions options);
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }  // rank within this group
  int size() const { return static_cast<int>(global_ranks_.size()); }
  const std::string& name() const { return name_; }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  int global_rank() const { return global_rank_; }
  const CommOptions& options() const { return options_; }
  virtual std::string backend() const = 0;

  WorkPtr all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  WorkPtr all_reduce(const std::vector<at::Tensor>& tensors, ReduceOp op = ReduceOp::kSum);
  WorkPtr all_gather(const at::Tensor& out, const at::Tensor& in);
  WorkPtr all_gather(const std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& ins);
  WorkPtr reduce_scatter(const at::Tensor& out, const at::Tensor& in,
                         ReduceOp op = ReduceOp::kSum);
  WorkPtr reduce_scatter(const std::vector<at::Tensor>& outs,
                         const std::vector<at::Tensor>& ins, ReduceOp op = ReduceOp::kSum);
  WorkPtr broadcast(const at::Tensor& tensor, int root);
  WorkPtr all_to_all(const at::Tensor& out, const at::Tensor& in);
  WorkPtr all_to_all_single(const at::Tensor& out, const at::Tensor& in,
                            std::vector<int64_t> out_splits, std::vector<int64_t> in_splits);
  // Point to point within the group (peer is a group rank). A send must meet a recv with
  // the same tag; where fused mode queues them (non-contiguous tensors, a backend that posts
  // nothing) both wait behind earlier ops, so order pairs accordingly.
  WorkPtr send(const at::Tensor& tensor, int dst, int tag = 0);
  WorkPtr recv(const at::Tensor& tensor, int src, int tag = 0);
  WorkPtr barrier();

 protected:
  // Backend hooks. Blocking; contiguous tensors (of any shape: a hook sees only the
  // elements) that passed the checks above; called for groups of size >= 2 only, by one
  // thread at a time, in issue order. current_op() describes the running op for error
  // messages.
  virtual void run_all_reduce(const at::Tensor& flat, ReduceOp op) = 0;
  virtual void run_all_gather(const at::Tensor& out, const at::Tensor& in) = 0;
  virtual void run_reduce_scatter(const at::Tensor& out, const at::Tensor& in, ReduceOp op) = 0;
  virtual void run_broadcast(const at::Tensor& tensor, int root) = 0;
  virtual void run_all_to_all(const at::Tensor& out, const at::Tensor& in) = 0;
  // all_to_all_single: counts in elements (rows x row size), indexed by group rank.
  virtual void run_all_to_all_v(const at::Tensor& out, const at::Tensor& in,
                                const std::vector<int64_t>& out_counts,
                                const std::vector<int64_t>& in_counts) = 0;
  virtual void run_send(const at::Tensor& tensor, int dst, int tag) = 0;
  virtual void run_recv(const at::Tensor& tensor, int src, int tag) = 0;
  virtual void run_barrier() = 0;
  // Devices this backend accepts (default: CPU only).
  virtual bool accepts(const at::Tensor& tensor) const;

  // Fused mode: a backend may post a send or receive of a contiguous tensor at issue, on the
  // calling thread, instead of queueing it behind the progress thread's other ops. Handing
  // it to that thread and back costs two thread wake-ups per transfer, which on a host with
  // as many busy threads as cores is a scheduler time slice; posted, the transfer still
  // overlaps compute until the returned Work's wait(). info: the op, for errors and the
  // watchdog. nullptr (the default): the op queues as the others do.
  virtual WorkPtr post_send(const at::Tensor& t, int dst, int tag, const OpInfo& info);
  virtual WorkPtr post_recv(const at::Tensor& t, int src, int tag, const OpInfo& info);

  // Runs fn now (separate mode, size-1 groups) or on the progress thread (fused mode).
  // Blocking ops in separate mode do not come here: they run inline, without building a
  // std::function or an OpInfo, unless a backend calls route_every_op_through_submit().
  // Virtual so that the sim backend can record the issue and hand back a Work that records
  // its wait instead of running anything.
  virtual WorkPtr submit(OpInfo info, std::function<void()> fn);
  void route_every_op_through_submit() { inline_blocking_ = false; }

  OpInfo current_op() const;
  // Runs every queued op and joins the progress thread. Backends call it first thing in
  // their destructor, before the resources the queued ops use go away.
  void stop_progress();

 private:
  OpInfo make_info(const char* op, int64_t bytes) const;
  // Runs fn now (inline) or hands it to submit(); op is a string literal.
  template <typename F>
  WorkPtr issue(const char* op, int64_t bytes, F&& fn);
  // post_send / post_recv's result when fused mode posts point-to-point ops (the observer
  // told, as for an op that runs); nullptr otherwise.
  template <typename Post>
  WorkPtr posted(const char* op, const at::Tensor& t, Post&& post);
  void notify_observer(const OpInfo& info) const;
  // Runs fn as op on this thread: tells the observer, watched by the watchdog. op stays
  // valid until fn returns.
  template <typename F>
  void run_watched(const char* op, int64_t bytes, F& fn);
  void begin_op(const char* op, int64_t bytes);
  void end_op() {
    watch_.end();
    current_op_ = "";
  }
  void check_tensor(const char* op, const at::Tensor& t) const;
  void check_reducible(const char* op, const at::Tensor& t) const;
  // Checks the (out, in) pairs of a list all_gather (out is the larger) or reduce_scatter
  // (in is); returns each pair's bucket bytes (the larger tensor) and appends its dtype.
  std::vector<int64_t> check_pairs(const char* op, const std::vector<at::Tensor>& outs,
                                   const std::vector<at::Tensor>& ins,
                                   std::vector<at::ScalarType>* dtypes) const;

  std::string name_;
  std::vector<int> global_ranks_;
  int global_rank_;
  int rank_;
  CommOptions options_;
  bool inline_blocking_;                 // separate mode or one rank: run on the caller
  const char* current_op_ = "";          // the running op, for current_op()
  int64_t current_bytes_ = 0;
  WatchSlot watch_;                      // this communicator's ops, one at a time
  std::unique_ptr<ProgressThread> progress_;  // created on the first async op
};

// Every collective a communicator runs is an at::RecordFunction user scope named
// kCollectiveScopePrefix + op ("titan::comm::all_gather"), with the group name and the call's
// bytes as its two inputs, on the thread that runs it: profilers see collectives beside the
// aten ops (trainer/step_profiler.h). Inactive scopes cost one check of the callback lists.
inline constexpr char kCollectiveScopePrefix[] = "titan::comm::";

// That scope, open for its lifetime (a posted op's wait).
class CollectiveScope {
 public:
  CollectiveScope(const std::string& group, const char* op, int64_t bytes);
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  c10::IValue inputs_[2];  // declared first: they outlive the scope, whose end callbacks may read them
  at::RecordFunction scope_{at::RecordScope::USER_SCOPE};
};

// Process-wide observer of every collective a communicator runs (op, group, total bytes of
// the call), called on the thread that runs it; for op logs and tests that compare a real
// run's collectives with a simulated one. Empty (default): nothing is called.
using CollectiveObserver = std::function<void(const OpInfo&)>;
void set_collective_observer(CollectiveObserver observer);

}  // namespace titan
