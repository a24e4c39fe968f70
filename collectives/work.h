// Work: the handle every Communicator op returns, so callers can overlap compute with
// communication and wait later. Used by the trainer, FSDP/TP/PP code and the backends.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

namespace titan {

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the op finished; rethrows the op's error (a titan::Error) if it failed.
  virtual void wait() = 0;
  virtual bool is_done() const = 0;

  // A handle that is already complete (blocking ops, size-1 groups, separate mode).
  static std::shared_ptr<Work> completed();
};

// Completed by whoever runs the op (a progress thread); waited on by the issuer.
class AsyncWork : public Work {
 public:
  void wait() override;
  bool is_done() const override;
  // Exactly one of these is called, once.
  void mark_done();
  void mark_failed(std::exception_ptr error);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace titan
