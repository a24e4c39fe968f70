// TransportCommunicator: the deterministic collective algorithms shared by the backends
// that move real bytes (mpi, gloo). A backend only supplies a few blocking primitives.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/communicator.h"

namespace titan {

// Algorithms (n = group size):
// - reduce_scatter: every rank sends block j of its input straight to rank j (one pairwise
//   exchange), then sums the n contributions to its own block in rank order. Same bytes
//   on the wire as a ring ((n-1)/n of the buffer per rank), but the order of additions
//   is fixed, which a ring or MPI_Allreduce's size-dependent algorithms do not give.
//   Blocks larger than the scratch buffer go in chunks (an exchange, then its reduction),
//   so the scratch stays bounded (kScratchBytes) and is allocated once, not per op.
// - all_reduce: reduce_scatter on near-equal blocks (any numel works), then all-gather;
//   up to kSmallAllReduceBytes: all-gather every rank's whole buffer and reduce locally
//   (one latency instead of two; same rank-order sums, so same bits).
// - all_gather, all_to_all, broadcast, send/recv, barrier: the backend's own primitives.
class TransportCommunicator : public Communicator {
 public:
  using Communicator::Communicator;
  static constexpr int64_t kSmallAllReduceBytes = 16 * 1024;
  // Received contributions per reduce_scatter chunk, all peers together.
  static constexpr int64_t kScratchBytes = 4 * 1024 * 1024;

 protected:
  // Counts and displacements are in elements of elem_size bytes, indexed by group rank.
  // exchange: for every peer p != rank(), send send_counts[p] elements at in +
  // send_displs[p] to p and receive recv_counts[p] from p into out + recv_displs[p].
  // Entries for rank() itself are ignored.
  virtual void exchange(const void* in, const std::vector<int64_t>& send_counts,
                        const std::vector<int64_t>& send_displs, void* out,
                        const std::vector<int64_t>& recv_counts,
                        const std::vector<int64_t>& recv_displs, size_t elem_size) = 0;
  // In-place all-gather: block r (counts[r] elements at displs[r]) comes from rank r; this
  // rank's block is already in place. Blocks are contiguous and in rank order.
  virtual void gather_in_place(void* buf, const std::vector<int64_t>& counts,
                               const std::vector<int64_t>& displs, size_t elem_size) = 0;
  // All-gather of equal blocks from `in` into `out` (count elements per rank). Default:
  // copy in into block rank() and gather in place; a backend may do it in one call.
  virtual void gather(const void* in, void* out, int64_t count, size_t elem_size);
  virtual void bcast(void* buf, int64_t count, size_t elem_size, int root) = 0;
  virtual void send_raw(const void* buf, int64_t count, size_t elem_size, int dst, int tag) = 0;
  virtual void recv_raw(void* buf, int64_t count, size_t elem_size, int src, int tag) = 0;
  virtual void barrier_raw() = 0;

  void run_all_reduce(const at::Tensor& flat, ReduceOp op) override;
  void run_all_gather(const at::Tensor& out, const at::Tensor& in) override;
  void run_reduce_scatter(const at::Tensor& out, const at::Tensor& in, ReduceOp op) override;
  void run_broadcast(const at::Tensor& tensor, int root) override;
  void run_all_to_all(const at::Tensor& out, const at::Tensor& in) override;
  void run_all_to_all_v(const at::Tensor& out, const at::Tensor& in,
                        const std::vector<int64_t>& out_counts,
                        const std::vector<int64_t>& in_counts) override;
  void run_send(const at::Tensor& tensor, int dst, int tag) override;
  void run_recv(const at::Tensor& tensor, int src, int tag) override;
  void run_barrier() override;

 private:
  // Reduces block rank() of `in` (blocks given by counts/displs) across the group into out.
  void reduce_block(const at::Tensor& in, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& displs, void* out, ReduceOp op);
  // Equal blocks of m elements; fills counts_ and displs_.
  void equal_blocks(int64_t m);
  // At least `bytes` of scratch, kept for later ops (so ops do not allocate).
  char* scratch(size_t bytes);

  // Per-op state reused from op to op: one op runs at a time per communicator.
  std::unique_ptr<char[]> scratch_;
  size_t scratch_bytes_ = 0;
  std::vector<int64_t> counts_, displs_, send_counts_, send_displs_, recv_counts_, recv_displs_;
  std::vector<const void*> inputs_;
};

}  // namespace titan
