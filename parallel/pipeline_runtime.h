// PipelineRuntime: executes one pipeline rank's action list (parallel/pipeline_schedule.h)
// for one batch of micro-batches: stage forwards and backwards through callbacks, activations
// and gradients over the pipeline group's send / recv (asynchronous in fused mode, blocking
// in separate mode), split backward through a WeightGradStore. Knows no model: the trainer
// supplies the stages (trainer/step/pipeline_model.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "collectives/communicator.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_weight_grad.h"

namespace titan {

struct PipelineStageFns {
  // Forward of `stage` on micro-batch mb. input: first_input(mb) on the first stage, else the
  // activation from stage - 1 (a leaf that requires grad). Returns the activation for
  // stage + 1, or on the last stage the micro-batch's loss (a scalar).
  std::function<torch::Tensor(int stage, int mb, const torch::Tensor& input)> forward;
  std::function<torch::Tensor(int mb)> first_input;
  // An empty tensor shaped like the activation entering `stage` (receive buffers).
  std::function<torch::Tensor(int stage)> activation_buffer;
  // REDUCE_GRAD of a stage (FSDP).
  std::function<void(int stage)> reduce_grad;
  // Optional: called before (begin = true) and after each action (simulation's trace cuts).
  std::function<void(const PipeAction& action, bool begin)> observer;
};

class PipelineRuntime {
 public:
  // rank: this rank's index in the pipeline group (= its pp coordinate); pp: that group.
  // store: required when the schedule splits backwards (I / W), else may be null.
  PipelineRuntime(PipeSchedule schedule, int rank, std::shared_ptr<Communicator> pp,
                  WeightGradStore* store);

  // Runs every action of this rank once. Returns the sum of the last stage's micro-batch
  // losses (undefined on ranks without the last stage). Every send has completed on return.
  torch::Tensor run(const PipelineStageFns& fns);

  const PipeSchedule& schedule() const { return schedule_; }
  int rank() const { return rank_; }

 private:
  struct Slot {  // one (stage, micro-batch)
    torch::Tensor input, output;   // the stage's input leaf and its output (or loss)
    torch::Tensor recv_act;        // received input activation
    torch::Tensor recv_grad;       // received output gradient
    WorkPtr recv_act_work, recv_grad_work;
  };
  Slot& slot(int stage, int mb) { return slots_[{stage, mb}]; }
  void forward(const PipeAction& a, const PipelineStageFns& fns);
  void backward(const PipeAction& a);
  void send(const PipeAction& a);
  void recv(const PipeAction& a, const PipelineStageFns& fns);
  void release_finished_sends();
  int peer(int stage) const { return schedule_.stage_rank[stage]; }

  PipeSchedule schedule_;
  int rank_;
  std::shared_ptr<Communicator> pp_;
  WeightGradStore* store_;
  std::map<std::pair<int, int>, Slot> slots_;
  struct Send {
    PipeAction action;
    WorkPtr work;
    torch::Tensor tensor;  // kept alive until the send completes
  };
  std::vector<Send> sends_;
  torch::Tensor loss_;
};

}  // namespace titan
