// The training state a checkpoint holds, as a list of stateful parts: model, optimizer, LR
// schedule, data position, RNG and train state. Each part saves itself into a save and
// stages itself from a checkpoint; adding a part is one entry in training_state(). Used by
// the Checkpointer.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace titan {

class Trainer;
struct CheckpointMeta;

// Where a part's save goes. tensors(): one tensor per optimizer parameter, written as the
// pieces this rank owns (layout from param_layout.h); `exportable` tensors take the export
// dtype in a model-only save.
struct SaveSink {
  CheckpointMeta& meta;  // scalars: meta.state[name] = value
  std::function<void(const std::string& group, const std::vector<torch::Tensor>& per_param, bool exportable)> tensors;
  torch::Tensor* rng;
  // A tensor that is not an optimizer parameter, written whole as group/name (the part
  // decides which rank writes it; moe_buffers.h).
  std::function<void(const std::string& group, const std::string& name, const torch::Tensor& t)> whole;
};

// What a part reads from. tensors(): this rank's pieces of a group, shaped like `like` (flat).
struct LoadSource {
  const CheckpointMeta& meta;
  std::function<std::vector<torch::Tensor>(const std::string& group, const std::vector<torch::Tensor>& like)> tensors;
  std::function<torch::Tensor()> rng;
  // The whole tensor group/name shaped like `like` (flat), or an undefined tensor when the
  // checkpoint lacks it; a shape other than like's throws.
  std::function<torch::Tensor(const std::string& group, const std::string& name, const torch::Tensor& like)> whole;
};

struct StatefulPart {
  std::string name;         // as checkpoint.exclude_from_loading names it
  bool model_only = false;  // saved and loaded by model-only checkpoints too
  std::function<void(SaveSink&)> save;
  // Reads into staging tensors and may throw (a damaged checkpoint leaves the live state
  // untouched); returns what applies the staged values once every rank staged everything.
  std::function<std::function<void()>(LoadSource&)> stage;
};

std::vector<StatefulPart> training_state(Trainer& trainer);

}  // namespace titan
