#include "collectives/transport_communicator.h"

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

void TransportCommunicator::reduce_block(const at::Tensor& in, const std::vector<int64_t>& counts,
                                         const std::vector<int64_t>& displs, void* out,
                                         ReduceOp op) {
  const int n = size();
  const int me = rank();
  const int64_t mine = counts[me];
  const size_t es = in.element_size();
  // Contributions of the other ranks to my block, packed in rank order (mine left out).
  at::Tensor recv = at::empty({(n - 1) * mine}, in.options());
  std::vector<int64_t> recv_counts(n, mine), recv_displs(n, 0);
  for (int p = 0; p < n; ++p) recv_displs[p] = (p < me ? p : p - 1) * mine;
  recv_counts[me] = 0;
  std::vector<int64_t> send_counts = counts;
  send_counts[me] = 0;
  exchange(in.data_ptr(), send_counts, displs, recv.data_ptr(), recv_counts, recv_displs, es);
  std::vector<const void*> inputs(n);
  for (int p = 0; p < n; ++p) {
    inputs[p] = p == me ? static_cast<const void*>(bytes_of(in) + displs[me] * es)
                        : static_cast<const void*>(bytes_of(recv) + recv_displs[p] * es);
  }
  reduce_ordered(in.scalar_type(), op, inputs, out, mine);
}

void TransportCommunicator::run_all_reduce(const at::Tensor& flat, ReduceOp op) {
  const int n = size();
  const size_t es = flat.element_size();
  if (flat.numel() * static_cast<int64_t>(es) <= kSmallAllReduceBytes) {
    // Small buffers are latency bound: one all-gather of every rank's whole buffer, then
    // the same rank-order reduction locally (so the bits match the large path).
    const int64_t m = flat.numel();
    at::Tensor all = at::empty({n * m}, flat.options());
    std::memcpy(bytes_of(all) + rank() * m * es, flat.data_ptr(), m * es);
    std::vector<int64_t> counts(n, m), displs(n);
    for (int r = 0; r < n; ++r) displs[r] = r * m;
    gather_in_place(all.data_ptr(), counts, displs, es);
    std::vector<const void*> inputs(n);
    for (int r = 0; r < n; ++r) inputs[r] = bytes_of(all) + r * m * es;
    reduce_ordered(flat.scalar_type(), op, inputs, flat.data_ptr(), m);
    return;
  }
  std::vector<int64_t> counts, displs;
  split_blocks(flat.numel(), n, counts, displs);
  // The reduced block overwrites this rank's own block in place (reduce_ordered allows it).
  reduce_block(flat, counts, displs, bytes_of(flat) + displs[rank()] * es, op);
  gather_in_place(flat.data_ptr(), counts, displs, es);
}

void TransportCommunicator::run_reduce_scatter(const at::Tensor& out, const at::Tensor& in,
                                               ReduceOp op) {
  std::vector<int64_t> counts(size(), out.numel()), displs(size());
  for (int r = 0; r < size(); ++r) displs[r] = r * out.numel();
  reduce_block(in, counts, displs, out.data_ptr(), op);
}

void TransportCommunicator::gather(const void* in, void* out, int64_t count, size_t es) {
  std::memcpy(static_cast<char*>(out) + rank() * count * es, in, count * es);
  std::vector<int64_t> counts(size(), count), displs(size());
  for (int r = 0; r < size(); ++r) displs[r] = r * count;
  gather_in_place(out, counts, displs, es);
}

void TransportCommunicator::run_all_gather(const at::Tensor& out, const at::Tensor& in) {
  gather(in.data_ptr(), out.data_ptr(), in.numel(), in.element_size());
}

void TransportCommunicator::run_all_to_all(const at::Tensor& out, const at::Tensor& in) {
  const int64_t m = in.numel() / size();
  const size_t es = in.element_size();
  std::vector<int64_t> counts(size(), m), displs(size());
  for (int r = 0; r < size(); ++r) displs[r] = r * m;
  exchange(in.data_ptr(), counts, displs, out.data_ptr(), counts, displs, es);
  std::memcpy(bytes_of(out) + rank() * m * es, bytes_of(in) + rank() * m * es, m * es);
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
