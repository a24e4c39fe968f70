// PostedWork: the Work of a send or receive a backend posted at issue, on the calling thread
// (Communicator::post_send / post_recv in fused mode): MPI_Isend / MPI_Irecv on mpi, an unbound
// buffer's send / recv on gloo. Used by the backends.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <mutex>

#include "collectives/watchdog.h"
#include "collectives/work.h"

namespace titan {

// wait() completes the transfer on the waiting thread, watched for timeout_s as a running op
// is and inside the op's profiler scope. The tensor is held until then; dropped unwaited, the
// work waits first (the transport must not write into, or read from, freed memory).
class PostedWork : public Work {
 public:
  // complete: blocks until the transfer is done; ends the job on a transport error.
  // test: whether it is done, without blocking (empty: the transport cannot tell; is_done()
  // says false until waited).
  PostedWork(at::Tensor tensor, OpInfo info, double timeout_s, std::function<void()> complete,
             std::function<bool()> test = nullptr);
  ~PostedWork() override;

  void wait() override;
  bool is_done() const override;

 private:
  void finish() const;

  mutable std::mutex mu_;
  mutable at::Tensor tensor_;
  const OpInfo info_;
  const double timeout_s_;
  const std::function<void()> complete_;
  const std::function<bool()> test_;
  mutable bool done_ = false;
};

}  // namespace titan
