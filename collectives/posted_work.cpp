#include "collectives/posted_work.h"

#include "collectives/communicator.h"

namespace titan {

PostedWork::PostedWork(at::Tensor tensor, OpInfo info, double timeout_s, std::function<void()> complete,
                       std::function<bool()> test)
    : tensor_(std::move(tensor)),
      info_(std::move(info)),
      timeout_s_(timeout_s),
      complete_(std::move(complete)),
      test_(std::move(test)) {}

PostedWork::~PostedWork() { wait(); }

void PostedWork::wait() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  CollectiveScope scope(info_.group, info_.op.c_str(), info_.bytes);
  WatchScope watch(info_, timeout_s_);
  complete_();
  finish();
}

bool PostedWork::is_done() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_ && test_ && test_()) finish();
  return done_;
}

void PostedWork::finish() const {
  done_ = true;
  tensor_ = at::Tensor();
}

}  // namespace titan
