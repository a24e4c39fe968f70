#include "collectives/transport_communicator.h"

#include <algorithm>
#include <cstring>

#include "collectives/reduce_kernels.h"

namespace titan {

namespace {

// Near-equal blocks: the first numel % n ranks get one element more.
void split_blocks(int64_t numel, int n, std::vector<int64_t>& counts,
                  std::vector<int64_t>& displs) {
  counts.assign(n, numel / n);
  displs.assign(n, 0);
  for (int r = 0; r < n; ++r) {
    if (r < numel % n) counts[r] += 1;
    if (r > 0) displs[r] = displs[r - 1] + counts[r - 1];
  }
}

char* bytes_of(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

}  // namespace

char* TransportCommunicator::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    scratch_.reset();  // the old contents are not needed: free before allocating
    scratch_.reset(new char[bytes]);
    scratch_bytes_ = bytes;
  }
  return scratch_.get();
}

void TransportCommunicator::equal_blocks(int64_t m) {
  counts_.assign(size(), m);
  displs_.resize(size());
  for (int r = 0; r < size(); ++r) displs_[r] = r * m;
}

void TransportCommunicator::reduce_block(const at::Tensor& in, const std::vector<int64_t>& counts,
                                         const std::vector<int64_t>& displs, void* out,
                                         ReduceOp op) {
  const int n = size();
  const int me = rank();
  const size_t es = in.element_size();
  const int64_t longest = *std::max_element(counts.begin(), counts.end());
  // Elements per peer per chunk; every rank derives the same chunks from the same counts.
  const int64_t chunk = std::max<int64_t>(1, kScratchBytes / static_cast<int64_t>((n - 1) * es));
  const int64_t mine_total = counts[me];
  char* recv = scratch(static_cast<size_t>(std::min(chunk, std::max<int64_t>(mine_total, 1)) *
                                           (n - 1) * static_cast<int64_t>(es)));
  send_counts_.resize(n);
  send_displs_.resize(n);
  recv_counts_.resize(n);
  recv_displs_.resize(n);
  inputs_.resize(n);
  // Contributions of the other ranks to my chunk arrive packed in rank order (mine left
  // out); block p of the input goes to rank p, chunk by chunk.
  for (int64_t start = 0; start < longest; start += chunk) {
    const int64_t mine = std::clamp<int64_t>(mine_total - start, 0, chunk);
    for (int p = 0; p < n; ++p) {
      send_counts_[p] = p == me ? 0 : std::clamp<int64_t>(counts[p] - start, 0, chunk);
      send_displs_[p] = displs[p] + std::min(start, counts[p]);
      recv_counts_[p] = p == me ? 0 : mine;
      recv_displs_[p] = (p < me ? p : p - 1) * mine;
    }
    exchange(in.data_ptr(), send_counts_, send_displs_, recv, recv_counts_, recv_displs_, es);
    if (mine == 0) continue;
    for (int p = 0; p < n; ++p) {
      inputs_[p] = p == me ? static_cast<const void*>(bytes_of(in) + (displs[me] + start) * es)
                           : static_cast<const void*>(recv + recv_displs_[p] * es);
    }
    reduce_ordered(in.scalar_type(), op, inputs_.data(), n, static_cast<char*>(out) + start * es,
                   mine);
  }
}

void TransportCommunicator::run_all_reduce(const at::Tensor& flat, ReduceOp op) {
  const int n = size();
  const size_t es = flat.element_size();
  const int64_t m = flat.numel();
  if (m * static_cast<int64_t>(es) <= kSmallAllReduceBytes) {
    // Small buffers are latency bound: one all-gather of every rank's whole buffer, then
    // the same rank-order reduction locally (so the bits match the large path).
    char* all = scratch(static_cast<size_t>(n * m) * es);
    gather(flat.data_ptr(), all, m, es);
    inputs_.resize(n);
    for (int r = 0; r < n; ++r) inputs_[r] = all + r * m * es;
    reduce_ordered(flat.scalar_type(), op, inputs_.data(), n, flat.data_ptr(), m);
    return;
  }
  split_blocks(m, n, counts_, displs_);
  // The reduced block overwrites this rank's own block in place (reduce_ordered allows it).
  reduce_block(flat, counts_, displs_, bytes_of(flat) + displs_[rank()] * es, op);
  gather_in_place(flat.data_ptr(), counts_, displs_, es);
}

void TransportCommunicator::run_reduce_scatter(const at::Tensor& out, const at::Tensor& in,
                                               ReduceOp op) {
  equal_blocks(out.numel());
  reduce_block(in, counts_, displs_, out.data_ptr(), op);
}

void TransportCommunicator::gather(const void* in, void* out, int64_t count, size_t es) {
  std::memcpy(static_cast<char*>(out) + rank() * count * es, in, count * es);
  equal_blocks(count);
  gather_in_place(out, counts_, displs_, es);
}

void TransportCommunicator::run_all_gather(const at::Tensor& out, const at::Tensor& in) {
  gather(in.data_ptr(), out.data_ptr(), in.numel(), in.element_size());
}

void TransportCommunicator::run_all_to_all(const at::Tensor& out, const at::Tensor& in) {
  const int64_t m = in.numel() / size();
  const size_t es = in.element_size();
  equal_blocks(m);
  exchange(in.data_ptr(), counts_, displs_, out.data_ptr(), counts_, displs_, es);
  std::memcpy(bytes_of(out) + rank() * m * es, bytes_of(in) + rank() * m * es, m * es);
}

// The backends' exchange is already count/displacement based (MPI_Alltoallv; gloo's
// unbound-buffer sends and receives), so uneven blocks need only the displacements.
void TransportCommunicator::run_all_to_all_v(const at::Tensor& out, const at::Tensor& in,
                                             const std::vector<int64_t>& out_counts,
                                             const std::vector<int64_t>& in_counts) {
  const int n = size();
  const size_t es = in.element_size();
  send_displs_.assign(n, 0);
  recv_displs_.assign(n, 0);
  for (int r = 1; r < n; ++r) {
    send_displs_[r] = send_displs_[r - 1] + in_counts[r - 1];
    recv_displs_[r] = recv_displs_[r - 1] + out_counts[r - 1];
  }
  exchange(in.data_ptr(), in_counts, send_displs_, out.data_ptr(), out_counts, recv_displs_, es);
  if (in_counts[rank()] > 0)
    std::memcpy(bytes_of(out) + recv_displs_[rank()] * es,
                bytes_of(in) + send_displs_[rank()] * es, in_counts[rank()] * es);
}

void TransportCommunicator::run_broadcast(const at::Tensor& t, int root) {
  bcast(t.data_ptr(), t.numel(), t.element_size(), root);
}

void TransportCommunicator::run_send(const at::Tensor& t, int dst, int tag) {
  send_raw(t.data_ptr(), t.numel(), t.element_size(), dst, tag);
}

void TransportCommunicator::run_recv(const at::Tensor& t, int src, int tag) {
  recv_raw(t.data_ptr(), t.numel(), t.element_size(), src, tag);
}

void TransportCommunicator::run_barrier() { barrier_raw(); }

}  // namespace titan
