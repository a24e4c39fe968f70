#include "parallel/pipeline_runtime.h"

#include "common/error.h"
#include "parallel/storage_listener.h"

namespace titan {
namespace {

// Tags keep activations and gradients apart; within each, pairs meet in schedule order.
constexpr int kActivationTag = 0;
constexpr int kGradientTag = 1;

}  // namespace

PipelineRuntime::PipelineRuntime(PipeSchedule schedule, int rank, std::shared_ptr<Communicator> pp,
                                 WeightGradStore* store)
    : schedule_(std::move(schedule)), rank_(rank), pp_(std::move(pp)), store_(store) {
  TITAN_CHECK(pp_ && pp_->size() == schedule_.num_ranks, "PipelineRuntime: the pipeline group has ",
              pp_ ? pp_->size() : 0, " ranks, the schedule ", schedule_.num_ranks);
  TITAN_CHECK(rank_ == pp_->rank(), "PipelineRuntime: rank ", rank_, " is not this process's pp rank ", pp_->rank());
  TITAN_CHECK(store_ || !schedule_.split_backward(), "PipelineRuntime: schedule '", schedule_.name,
              "' splits backwards but no WeightGradStore was given");
}

void PipelineRuntime::forward(const PipeAction& a, const PipelineStageFns& fns) {
  Slot& s = slot(a.stage, a.microbatch);
  torch::Tensor in;
  if (a.stage == 0) {
    in = fns.first_input(a.microbatch);
  } else {
    torch::Tensor from;
    if (peer(a.stage - 1) == rank_) {
      from = slot(a.stage - 1, a.microbatch).output;  // same rank: hand over directly
    } else {
      TITAN_CHECK(s.recv_act_work, "pipeline: ", a.to_string(), " before its RECV_F");
      s.recv_act_work->wait();
      from = s.recv_act;
    }
    in = from.detach().requires_grad_(true);
  }
  s.input = in;
  s.output = fns.forward(a.stage, a.microbatch, in);
  if (a.stage == schedule_.num_stages - 1) {
    auto l = s.output.detach();
    loss_ = loss_.defined() ? loss_ + l : l;
  }
}

void PipelineRuntime::backward(const PipeAction& a) {
  Slot& s = slot(a.stage, a.microbatch);
  TITAN_CHECK(s.output.defined(), "pipeline: ", a.to_string(), " before its forward");
  const bool last = a.stage == schedule_.num_stages - 1;
  torch::Tensor grad;
  if (!last) {
    if (peer(a.stage + 1) == rank_) {
      grad = slot(a.stage + 1, a.microbatch).input.grad();
    } else {
      TITAN_CHECK(s.recv_grad_work, "pipeline: ", a.to_string(), " before its RECV_B");
      s.recv_grad_work->wait();
      grad = s.recv_grad;
    }
    TITAN_CHECK(grad.defined(), "pipeline: no output gradient for ", a.to_string());
  }
  const bool split = a.op == PipeOp::kBackwardInput;
  if (split) store_->begin(a.stage, a.microbatch);
  if (last) {
    s.output.backward();
  } else {
    torch::autograd::backward({s.output}, {grad});
  }
  if (split) store_->end();
  s.output = torch::Tensor();  // the graph is spent; the input (and its grad) stays for SEND_B
  s.recv_grad = torch::Tensor();
}

void PipelineRuntime::send(const PipeAction& a) {
  Slot& s = slot(a.stage, a.microbatch);
  torch::Tensor t;
  int to = 0, tag = 0;
  if (a.op == PipeOp::kSendF) {
    TITAN_CHECK(s.output.defined(), "pipeline: ", a.to_string(), " before its forward");
    t = s.output.detach().contiguous();
    to = peer(a.stage + 1), tag = kActivationTag;
  } else {
    t = s.input.defined() ? s.input.grad() : torch::Tensor();
    TITAN_CHECK(t.defined(), "pipeline: ", a.to_string(), " before its backward");
    t = t.contiguous();
    to = peer(a.stage - 1), tag = kGradientTag;
    s.input = torch::Tensor();
  }
  sends_.push_back({a, pp_->send(t, to, tag), t});
}

// A completed send's buffer is released as soon as nothing else holds it: an input gradient at
// once, an activation once its stage's backward has dropped the output it shares storage with.
// Holding every send until the end of the run kept one activation and one gradient per
// micro-batch alive: memory that grew with the micro-batch count.
void PipelineRuntime::release_finished_sends() {
  auto releasable = [&](const Send& s) {
    if (!s.work->is_done()) return false;
    if (s.action.op == PipeOp::kSendB) return true;
    const auto at = slots_.find({s.action.stage, s.action.microbatch});
    return at == slots_.end() || !at->second.output.defined();
  };
  auto keep = sends_.begin();
  for (auto it = sends_.begin(); it != sends_.end(); ++it) {
    if (releasable(*it)) {
      it->work->wait();  // done: returns at once, and reports a failed send here
      release_storage(it->tensor);
    } else {
      if (keep != it) *keep = std::move(*it);
      ++keep;
    }
  }
  sends_.erase(keep, sends_.end());
}

void PipelineRuntime::recv(const PipeAction& a, const PipelineStageFns& fns) {
  Slot& s = slot(a.stage, a.microbatch);
  if (a.op == PipeOp::kRecvF) {
    s.recv_act = fns.activation_buffer(a.stage);
    s.recv_act_work = pp_->recv(s.recv_act, peer(a.stage - 1), kActivationTag);
  } else {
    s.recv_grad = fns.activation_buffer(a.stage + 1);
    s.recv_grad_work = pp_->recv(s.recv_grad, peer(a.stage + 1), kGradientTag);
  }
}

torch::Tensor PipelineRuntime::run(const PipelineStageFns& fns) {
  loss_ = torch::Tensor();
  for (const PipeAction& a : schedule_.ranks[rank_]) {
    if (fns.observer) fns.observer(a, true);
    switch (a.op) {
      case PipeOp::kForward:
        forward(a, fns);
        break;
      case PipeOp::kBackward:
      case PipeOp::kBackwardInput:
        backward(a);
        break;
      case PipeOp::kBackwardWeight:
        store_->flush(a.stage, a.microbatch);
        break;
      case PipeOp::kSendF:
      case PipeOp::kSendB:
        send(a);
        break;
      case PipeOp::kRecvF:
      case PipeOp::kRecvB:
        recv(a, fns);
        break;
      case PipeOp::kReduceGrad:
        fns.reduce_grad(a.stage);
        break;
      case PipeOp::kUnshard:
      case PipeOp::kReshard:
        TITAN_FAIL("pipeline: ", a.to_string(), " is not supported by the runtime");
    }
    // Inside the action's scope: the simulator's recording cuts segments at these bounds.
    release_finished_sends();
    if (fns.observer) fns.observer(a, false);
  }
  for (auto& s : sends_) {
    s.work->wait();
    release_storage(s.tensor);  // held for the send until here
  }
  sends_.clear();
  TITAN_CHECK(!store_ || store_->pending() == 0, "pipeline: ", store_ ? store_->pending() : 0,
              " deferred weight gradients were never computed (an I without its W)");
  slots_.clear();
  return loss_;
}

}  // namespace titan
