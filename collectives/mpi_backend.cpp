// The mpi backend: Open MPI, one MPI communicator per group (MPI_Comm_create_group).
#include <climits>
#include <mutex>
#include <sstream>

#include "collectives/backend.h"
#include "collectives/mpi_runtime.h"
#include "collectives/posted_work.h"
#include "collectives/transport_communicator.h"
#include "collectives/watchdog.h"
#include "common/error.h"

namespace titan {

namespace {

// Data movement only needs the element size; reductions happen in reduce_ordered().
MPI_Datatype element_type(size_t elem_size) {
  switch (elem_size) {
    case 1:
      return MPI_UINT8_T;
    case 2:
      return MPI_UINT16_T;
    case 4:
      return MPI_UINT32_T;
    case 8:
      return MPI_UINT64_T;
    default:
      TITAN_FAIL("mpi backend: element size ", elem_size, " is not supported");
  }
}

// Ends the job naming the op when an MPI call for it failed.
void abort_on_error(const OpInfo& info, int rc) {
  if (rc != MPI_SUCCESS) abort_job(describe(info) + " failed: " + mpi_error_string(rc));
}

// The Work of a send or receive posted with MPI_Isend / MPI_Irecv (fused mode).
WorkPtr request_work(MPI_Request request, const at::Tensor& t, const OpInfo& info, double timeout_s) {
  auto req = std::make_shared<MPI_Request>(request);
  return std::make_shared<PostedWork>(
      t, info, timeout_s, [req, info] { abort_on_error(info, MPI_Wait(req.get(), MPI_STATUS_IGNORE)); },
      [req, info] {
        int flag = 0;
        abort_on_error(info, MPI_Test(req.get(), &flag, MPI_STATUS_IGNORE));
        return flag != 0;
      });
}

class MpiCommunicator : public TransportCommunicator {
 public:
  MpiCommunicator(MpiComm comm, std::string name, std::vector<int> ranks, int global_rank,
                  CommOptions options)
      : TransportCommunicator(std::move(name), std::move(ranks), global_rank, std::move(options)),
        comm_(std::move(comm)) {}
  ~MpiCommunicator() override { stop_progress(); }
  std::string backend() const override { return "mpi"; }

 protected:
  void exchange(const void* in, const std::vector<int64_t>& send_counts,
                const std::vector<int64_t>& send_displs, void* out,
                const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                size_t elem_size) override {
    ints(send_counts, sc_);
    ints(send_displs, sd_);
    ints(recv_counts, rc_);
    ints(recv_displs, rd_);
    sc_[rank()] = rc_[rank()] = 0;
    MPI_Datatype t = element_type(elem_size);
    check(MPI_Alltoallv(in, sc_.data(), sd_.data(), t, out, rc_.data(), rd_.data(), t,
                        comm_.get()));
  }

  void gather_in_place(void* buf, const std::vector<int64_t>& counts,
                       const std::vector<int64_t>& displs, size_t elem_size) override {
    // Equal blocks (every all_gather, most all_reduces) take MPI_Allgather, whose tuned
    // algorithms Open MPI picks far better than Allgatherv's (5x at 1 MiB on 2 ranks).
    bool equal = true;
    for (size_t r = 1; r < counts.size(); ++r) equal = equal && counts[r] == counts[0];
    if (equal) {
      check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, to_int(counts[0]),
                          element_type(elem_size), comm_.get()));
      return;
    }
    ints(counts, rc_);
    ints(displs, rd_);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, rc_.data(), rd_.data(),
                         element_type(elem_size), comm_.get()));
  }

  void gather(const void* in, void* out, int64_t count, size_t elem_size) override {
    MPI_Datatype t = element_type(elem_size);
    check(MPI_Allgather(in, to_int(count), t, out, to_int(count), t, comm_.get()));
  }

  void bcast(void* buf, int64_t count, size_t elem_size, int root) override {
    check(MPI_Bcast(buf, to_int(count), element_type(elem_size), root, comm_.get()));
  }

  void send_raw(const void* buf, int64_t count, size_t elem_size, int dst, int tag) override {
    check(MPI_Send(buf, to_int(count), element_type(elem_size), dst, tag, comm_.get()));
  }

  void recv_raw(void* buf, int64_t count, size_t elem_size, int src, int tag) override {
    MPI_Status status;
    check(MPI_Recv(buf, to_int(count), element_type(elem_size), src, tag, comm_.get(), &status));
  }

  void barrier_raw() override { check(MPI_Barrier(comm_.get())); }

  WorkPtr post_send(const at::Tensor& t, int dst, int tag, const OpInfo& info) override {
    MPI_Request request;
    const MPI_Datatype type = element_type(t.element_size());
    abort_on_error(info, MPI_Isend(t.data_ptr(), to_int(t.numel()), type, dst, tag, comm_.get(), &request));
    return request_work(request, t, info, options().train_timeout_seconds);
  }
  WorkPtr post_recv(const at::Tensor& t, int src, int tag, const OpInfo& info) override {
    MPI_Request request;
    const MPI_Datatype type = element_type(t.element_size());
    abort_on_error(info, MPI_Irecv(t.data_ptr(), to_int(t.numel()), type, src, tag, comm_.get(), &request));
    return request_work(request, t, info, options().train_timeout_seconds);
  }

  // Two ranks: each element of a sum is one addition a + b, and IEEE addition is
  // commutative, so MPI_Allreduce gives the bits of the rank-order reduction
  // (reduce_ordered) whatever algorithm Open MPI picks for the size, in one tuned call
  // instead of an exchange plus a gather (or a gather plus a local sum). Not for kMax
  // (std::max's NaN result depends on the order), bfloat16 (no MPI type; it sums in
  // float) or three ranks and more ((a + b) + c is not a + (b + c)).
  void run_all_reduce(const at::Tensor& flat, ReduceOp op) override {
    const MPI_Datatype t = sum_type(flat.scalar_type());
    if (size() != 2 || op == ReduceOp::kMax || t == MPI_DATATYPE_NULL || flat.numel() > INT_MAX) {
      TransportCommunicator::run_all_reduce(flat, op);
      return;
    }
    check(MPI_Allreduce(MPI_IN_PLACE, flat.data_ptr(), static_cast<int>(flat.numel()), t, MPI_SUM,
                        comm_.get()));
    if (op == ReduceOp::kAvg) halve(flat);
  }

 private:
  // MPI counts and displacements are int.
  int to_int(int64_t v) const {
    TITAN_CHECK(v <= INT_MAX, describe(current_op()), ": ", v,
                " elements exceed MPI's int counts; use smaller tensors or buckets");
    return static_cast<int>(v);
  }
  void ints(const std::vector<int64_t>& v, std::vector<int>& out) const {
    out.resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = to_int(v[i]);
  }
  // The communicator returns errors (MPI_ERRORS_RETURN) so that they end the job with our
  // message rather than MPI's.
  void check(int rc) const {
    if (rc != MPI_SUCCESS) abort_job(describe(current_op()) + " failed: " + mpi_error_string(rc));
  }

  static MPI_Datatype sum_type(at::ScalarType dtype) {
    switch (dtype) {
      case at::kFloat:
        return MPI_FLOAT;
      case at::kDouble:
        return MPI_DOUBLE;
      case at::kInt:
        return MPI_INT32_T;
      case at::kLong:
        return MPI_INT64_T;
      default:
        return MPI_DATATYPE_NULL;
    }
  }
  // The average of two: the sum divided by 2 in the element type, as reduce_ordered does.
  template <typename T>
  static void halve_typed(T* p, int64_t n) {
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] / T(2);
  }
  static void halve(const at::Tensor& flat) {
    switch (flat.scalar_type()) {
      case at::kFloat:
        return halve_typed(flat.data_ptr<float>(), flat.numel());
      case at::kDouble:
        return halve_typed(flat.data_ptr<double>(), flat.numel());
      case at::kInt:
        return halve_typed(flat.data_ptr<int32_t>(), flat.numel());
      default:
        return halve_typed(flat.data_ptr<int64_t>(), flat.numel());
    }
  }

  MpiComm comm_;
  std::vector<int> sc_, sd_, rc_, rd_;  // MPI's int counts, reused from op to op
};

class MpiBackend : public Backend {
 public:
  explicit MpiBackend(const CommOptions& options) : options_(options) {
    int provided = ensure_mpi_initialized();
    TITAN_CONFIG_CHECK(provided >= MPI_THREAD_MULTIPLE || !is_fused(options),
                       "comm.collective_mode = \"fused\" needs MPI_THREAD_MULTIPLE, but this MPI "
                       "provides thread level ", provided, "; use collective_mode = \"separate\"");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks,
                                          const std::string& name) override {
    OpInfo info;
    info.op = "new_group";
    info.group = name;
    info.group_size = static_cast<int>(ranks.size());
    info.global_rank = rank_;
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == rank_) info.group_rank = static_cast<int>(i);
    WatchScope watch(info, options_.init_timeout_seconds);
    MPI_Group world_group, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &group);
    MPI_Comm raw = MPI_COMM_NULL;
    // Unlike MPI_Comm_split, only the members take part, so a rank builds just its own
    // groups (a mesh dim is one call per rank, not one per group).
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, /*tag=*/0, &raw);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    if (rc != MPI_SUCCESS) abort_job(describe(info) + " failed: " + mpi_error_string(rc));
    MPI_Comm_set_errhandler(raw, MPI_ERRORS_RETURN);
    return std::make_shared<MpiCommunicator>(MpiComm(raw), name, ranks, rank_, options_);
  }

 private:
  CommOptions options_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

void register_mpi_backend() {
  register_backend("mpi", [](const CommOptions& o) { return std::make_unique<MpiBackend>(o); });
}

}  // namespace titan
