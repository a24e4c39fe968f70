// Deferred weight gradients for zero-bubble pipeline schedules: a linear product whose
// backward computes the input gradient at once and, while a WeightGradStore is collecting
// (an I action), leaves the weight gradient for later (the matching W action). Installed on
// a stage's linear layers by the trainer's pipeline plan; run by parallel/pipeline_runtime.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace titan {

class WeightGradStore {
 public:
  // Between begin and end (one I action), deferred_linear keeps its weight gradients under
  // (stage, micro-batch) instead of computing them.
  void begin(int stage, int microbatch);
  void end();
  bool collecting() const { return collecting_; }

  // Called by deferred_linear's backward while collecting.
  void defer(const torch::Tensor& weight, const torch::Tensor& input, const torch::Tensor& grad_output);

  // The W action: computes every weight gradient kept for (stage, micro-batch) and passes
  // it to autograd at the weight, so it accumulates into the parameter's .grad or flows on
  // to whatever produced the weight (an FSDP all-gather, which reduces it).
  void flush(int stage, int microbatch);
  size_t pending() const;  // entries not yet flushed

 private:
  struct Entry {
    torch::Tensor weight, input, grad_output;
  };
  bool collecting_ = false;
  std::pair<int, int> key_{-1, -1};
  std::map<std::pair<int, int>, std::vector<Entry>> entries_;
};

// y = x W^T (W [out, in]); backward gives dx = dy W and, unless `store` is collecting,
// dW = dy^T x. store may be null (plain linear).
torch::Tensor deferred_linear(const torch::Tensor& x, const torch::Tensor& weight, WeightGradStore* store);

}  // namespace titan
