#include "collectives/work.h"

namespace titan {

namespace {
class CompletedWork : public Work {
 public:
  void wait() override {}
  bool is_done() const override { return true; }
};
}  // namespace

std::shared_ptr<Work> Work::completed() {
  static const std::shared_ptr<Work> done = std::make_shared<CompletedWork>();
  return done;
}

void AsyncWork::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool AsyncWork::is_done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void AsyncWork::mark_done() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

void AsyncWork::mark_failed(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace titan
