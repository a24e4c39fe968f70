#include "collectives/communicator.h"

#include <c10/util/ThreadLocalDebugInfo.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "collectives/contiguous.h"
#include "collectives/progress_thread.h"
#include "collectives/reduce_kernels.h"
#include "common/error.h"

namespace titan {

namespace {

int group_rank_of(const std::vector<int>& ranks, int global_rank, const std::string& name) {
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  TITAN_CHECK(it != ranks.end(), "group '", name, "': global rank ", global_rank,
              " is not a member");
  return static_cast<int>(it - ranks.begin());
}

OpInfo member_info(const std::string& name, int size, int rank, int global_rank) {
  OpInfo info;
  info.group = name;
  info.group_rank = rank;
  info.group_size = size;
  info.global_rank = global_rank;
  return info;
}

}  // namespace

Communicator::Communicator(std::string name, std::vector<int> global_ranks, int global_rank,
                           CommOptions options)
    : name_(std::move(name)),
      global_ranks_(std::move(global_ranks)),
      global_rank_(global_rank),
      rank_(group_rank_of(global_ranks_, global_rank_, name_)),
      options_(std::move(options)),
      inline_blocking_(size() == 1 || !is_fused(options_)),
      watch_(member_info(name_, size(), rank_, global_rank_), options_.train_timeout_seconds) {}

Communicator::~Communicator() { stop_progress(); }

void Communicator::stop_progress() { progress_.reset(); }

bool Communicator::accepts(const at::Tensor& t) const { return t.device().is_cpu(); }

OpInfo Communicator::make_info(const char* op, int64_t bytes) const {
  OpInfo info = watch_.who();
  info.op = op;
  info.bytes = bytes;
  return info;
}

OpInfo Communicator::current_op() const { return make_info(current_op_, current_bytes_); }

void Communicator::check_tensor(const char* op, const at::Tensor& t) const {
  TITAN_CHECK(t.defined(), op, " on group '", name_, "': undefined tensor");
  TITAN_CHECK(accepts(t), op, " on group '", name_, "': backend ", backend(),
              " does not take tensors on ", t.device());
}

void Communicator::check_reducible(const char* op, const at::Tensor& t) const {
  check_tensor(op, t);
  TITAN_CHECK(reducible_dtype(t.scalar_type()), op, " on group '", name_, "': dtype ",
              t.scalar_type(), " cannot be reduced (float32, float64, bfloat16, int32, int64)");
}

namespace {
std::mutex observer_mu;
CollectiveObserver observer;
std::atomic<bool> observer_set{false};  // lets ops skip the lock when nobody observes
}  // namespace

void set_collective_observer(CollectiveObserver o) {
  std::lock_guard<std::mutex> lock(observer_mu);
  observer = std::move(o);
  observer_set.store(static_cast<bool>(observer), std::memory_order_release);
}

void Communicator::notify_observer(const OpInfo& info) const {
  if (observer_set.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(observer_mu);
    if (observer) observer(info);
  }
}

void Communicator::begin_op(const char* op, int64_t bytes) {
  current_op_ = op;
  current_bytes_ = bytes;
  if (observer_set.load(std::memory_order_acquire)) notify_observer(make_info(op, bytes));
  watch_.begin(op, bytes);
}

CollectiveScope::CollectiveScope(const std::string& group, const char* op, int64_t bytes) {
  if (scope_.isActive()) {
    inputs_[0] = group;
    inputs_[1] = bytes;
    scope_.before(std::string(kCollectiveScopePrefix) + op, c10::ArrayRef<const c10::IValue>(inputs_, 2));
  }
}

template <typename F>
void Communicator::run_watched(const char* op, int64_t bytes, F& fn) {
  CollectiveScope scope(name_, op, bytes);
  begin_op(op, bytes);
  struct End {
    Communicator* c;
    ~End() { c->end_op(); }
  } end{this};
  fn();
}

template <typename F>
WorkPtr Communicator::issue(const char* op, int64_t bytes, F&& fn) {
  if (!inline_blocking_) return submit(make_info(op, bytes), std::forward<F>(fn));
  run_watched(op, bytes, fn);
  return Work::completed();
}

WorkPtr Communicator::post_send(const at::Tensor&, int, int, const OpInfo&) { return nullptr; }
WorkPtr Communicator::post_recv(const at::Tensor&, int, int, const OpInfo&) { return nullptr; }

template <typename Post>
WorkPtr Communicator::posted(const char* op, const at::Tensor& t, Post&& post) {
  if (size() == 1 || !is_fused(options_) || !t.is_contiguous()) return nullptr;
  const OpInfo info = make_info(op, nbytes(t));
  WorkPtr work = post(info);
  if (work) notify_observer(info);
  return work;
}

WorkPtr Communicator::submit(OpInfo info, std::function<void()> fn) {
  if (size() == 1 || !is_fused(options_)) {
    run_watched(info.op.c_str(), info.bytes, fn);
    return Work::completed();
  }
  if (!progress_) progress_ = std::make_unique<ProgressThread>();
  auto work = std::make_shared<AsyncWork>();
  // The op runs under the issuer's c10 debug info, as autograd's worker threads do, so a
  // memory listener installed by the issuer (the profiler, TensorMemoryTracker) also sees what
  // the op allocates and frees. Its closure holds tensors: it is dropped under that debug info
  // and before the work completes, so a waiter has seen those frees too.
  progress_->post([this, info = std::move(info), fn = std::move(fn), work,
                   debug = c10::ThreadLocalDebugInfo::current()]() mutable {
    c10::DebugInfoGuard guard(std::move(debug));
    try {
      run_watched(info.op.c_str(), info.bytes, fn);
      fn = nullptr;
      work->mark_done();
    } catch (...) {
      fn = nullptr;
      work->mark_failed(std::current_exception());
    }
  });
  return work;
}

// ---- single-tensor ops ----

WorkPtr Communicator::all_reduce(const at::Tensor& t, ReduceOp op) {
  check_reducible("all_reduce", t);
  if (size() == 1) return Work::completed();  // sum, avg and max of one value are the value
  return issue("all_reduce", nbytes(t), [this, t, op] {
    with_contiguous(t, [&](const at::Tensor& c) { run_all_reduce(c, op); });
  });
}

WorkPtr Communicator::all_gather(const at::Tensor& out, const at::Tensor& in) {
  check_tensor("all_gather", out);
  check_tensor("all_gather", in);
  TITAN_CHECK(out.scalar_type() == in.scalar_type(), "all_gather on group '", name_,
              "': out dtype ", out.scalar_type(), " != in dtype ", in.scalar_type());
  TITAN_CHECK(out.numel() == size() * in.numel(), "all_gather on group '", name_, "': out has ",
              out.numel(), " elements, expected group size ", size(), " x in ", in.numel(),
              " = ", size() * in.numel());
  if (size() == 1) {
    out.view_as(in).copy_(in);
    return Work::completed();
  }
  return issue("all_gather", nbytes(out), [this, out, in] {
    at::Tensor c_in = in.contiguous();
    with_contiguous(out, [&](const at::Tensor& c_out) { run_all_gather(c_out, c_in); });
  });
}

WorkPtr Communicator::reduce_scatter(const at::Tensor& out, const at::Tensor& in, ReduceOp op) {
  check_reducible("reduce_scatter", out);
  check_reducible("reduce_scatter", in);
  TITAN_CHECK(out.scalar_type() == in.scalar_type(), "reduce_scatter on group '", name_,
              "': out dtype ", out.scalar_type(), " != in dtype ", in.scalar_type());
  TITAN_CHECK(in.numel() == size() * out.numel(), "reduce_scatter on group '", name_,
              "': in has ", in.numel(), " elements, expected group size ", size(), " x out ",
              out.numel(), " = ", size() * out.numel(),
              " (pad the input to a multiple of the group size)");
  if (size() == 1) {
    out.copy_(in.view_as(out));
    return Work::completed();
  }
  return issue("reduce_scatter", nbytes(in), [this, out, in, op] {
    at::Tensor c_in = in.contiguous();
    with_contiguous(out, [&](const at::Tensor& c_out) { run_reduce_scatter(c_out, c_in, op); });
  });
}

WorkPtr Communicator::broadcast(const at::Tensor& t, int root) {
  check_tensor("broadcast", t);
  TITAN_CHECK(root >= 0 && root < size(), "broadcast on group '", name_, "': root ", root,
              " out of range [0, ", size(), ")");
  if (size() == 1) return Work::completed();
  return issue("broadcast", nbytes(t), [this, t, root] {
    with_contiguous(t, [&](const at::Tensor& c) { run_broadcast(c, root); });
  });
}

WorkPtr Communicator::all_to_all(const at::Tensor& out, const at::Tensor& in) {
  check_tensor("all_to_all", out);
  check_tensor("all_to_all", in);
  TITAN_CHECK(out.scalar_type() == in.scalar_type(), "all_to_all on group '", name_,
              "': out dtype ", out.scalar_type(), " != in dtype ", in.scalar_type());
  TITAN_CHECK(out.numel() == in.numel() && in.numel() % size() == 0, "all_to_all on group '",
              name_, "': in (", in.numel(), ") and out (", out.numel(),
              ") elements must be equal and divisible by the group size ", size());
  if (size() == 1) {
    out.copy_(in.view_as(out));
    return Work::completed();
  }
  return issue("all_to_all", nbytes(in), [this, out, in] {
    at::Tensor c_in = in.contiguous();
    with_contiguous(out, [&](const at::Tensor& c_out) { run_all_to_all(c_out, c_in); });
  });
}

namespace {
// Rows per rank -> elements per rank; empty splits: equal blocks of rows.
std::vector<int64_t> split_elements(const std::string& group, const char* which,
                                    std::vector<int64_t> splits, const at::Tensor& t, int n) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t row = rows == 0 ? 0 : t.numel() / rows;
  if (splits.empty()) {
    TITAN_CHECK(rows % n == 0, "all_to_all_single on group '", group, "': no ", which,
                " given and ", rows, " rows do not divide into ", n, " equal blocks");
    splits.assign(n, rows / n);
  }
  TITAN_CHECK(static_cast<int>(splits.size()) == n, "all_to_all_single on group '", group,
              "': ", which, " has ", splits.size(), " entries, group size is ", n);
  int64_t total = 0;
  for (int64_t& s : splits) {
    TITAN_CHECK(s >= 0, "all_to_all_single on group '", group, "': negative entry in ", which);
    total += s;
    s *= row;
  }
  TITAN_CHECK(total == rows, "all_to_all_single on group '", group, "': ", which, " sum to ",
              total, " rows, the tensor has ", rows);
  return splits;
}
}  // namespace

WorkPtr Communicator::all_to_all_single(const at::Tensor& out, const at::Tensor& in,
                                        std::vector<int64_t> out_splits,
                                        std::vector<int64_t> in_splits) {
  check_tensor("all_to_all_single", out);
  check_tensor("all_to_all_single", in);
  TITAN_CHECK(out.scalar_type() == in.scalar_type(), "all_to_all_single on group '", name_,
              "': out dtype ", out.scalar_type(), " != in dtype ", in.scalar_type());
  TITAN_CHECK(out.dim() == in.dim() && (in.dim() < 2 || out.sizes().slice(1) == in.sizes().slice(1)),
              "all_to_all_single on group '", name_, "': rows of out ", out.sizes(),
              " and in ", in.sizes(), " differ in shape");
  auto out_counts = split_elements(name_, "out_splits", std::move(out_splits), out, size());
  auto in_counts = split_elements(name_, "in_splits", std::move(in_splits), in, size());
  TITAN_CHECK(out_counts[rank_] == in_counts[rank_], "all_to_all_single on group '", name_,
              "': rank ", rank_, " keeps ", in_counts[rank_], " elements of its own but expects ",
              out_counts[rank_]);
  if (size() == 1) {
    if (in.numel() > 0) out.view_as(in).copy_(in);
    return Work::completed();
  }
  return issue("all_to_all", nbytes(in),
               [this, out, in, oc = std::move(out_counts), ic = std::move(in_counts)] {
                 at::Tensor c_in = in.contiguous();
                 with_contiguous(out, [&](const at::Tensor& c_out) {
                   run_all_to_all_v(c_out, c_in, oc, ic);
                 });
               });
}

WorkPtr Communicator::send(const at::Tensor& t, int dst, int tag) {
  check_tensor("send", t);
  TITAN_CHECK(dst >= 0 && dst < size() && dst != rank_, "send on group '", name_,
              "': destination ", dst, " must be another rank in [0, ", size(), ")");
  TITAN_CHECK(tag >= 0, "send on group '", name_, "': tag must be >= 0, got ", tag);
  if (WorkPtr w = posted("send", t, [&](const OpInfo& info) { return post_send(t, dst, tag, info); })) return w;
  return issue("send", nbytes(t), [this, t, dst, tag] { run_send(t.contiguous(), dst, tag); });
}

WorkPtr Communicator::recv(const at::Tensor& t, int src, int tag) {
  check_tensor("recv", t);
  TITAN_CHECK(src >= 0 && src < size() && src != rank_, "recv on group '", name_, "': source ",
              src, " must be another rank in [0, ", size(), ")");
  TITAN_CHECK(tag >= 0, "recv on group '", name_, "': tag must be >= 0, got ", tag);
  if (WorkPtr w = posted("recv", t, [&](const OpInfo& info) { return post_recv(t, src, tag, info); })) return w;
  return issue("recv", nbytes(t), [this, t, src, tag] {
    with_contiguous(t, [&](const at::Tensor& c) { run_recv(c, src, tag); });
  });
}

WorkPtr Communicator::barrier() {
  if (size() == 1) return Work::completed();
  return issue("barrier", 0, [this] { run_barrier(); });
}

}  // namespace titan
