#include "trainer/checkpoint/moe_buffers.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "trainer/checkpoint/training_state.h"
#include "trainer/model/moe.h"
#include "trainer/step/pipeline_model.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace {

constexpr const char* kGroup = "model_buffers";

// (name, block) for every MoE block of this rank's pipeline stages (a stage keeps the other
// stages' blocks, untrained, with zero biases).
std::vector<std::pair<std::string, MoEImpl*>> local_blocks(Trainer& t) {
  std::vector<std::pair<std::string, MoEImpl*>> out;
  auto& layers = t.model()->layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i] || !layers[i]->moe || layers[i]->moe->expert_bias.is_meta()) continue;
    if (t.pipeline() && !t.pipeline()->holds_layer(static_cast<int64_t>(i))) continue;
    out.emplace_back("layers." + std::to_string(i) + ".moe.expert_bias", layers[i]->moe.get());
  }
  return out;
}

// The first rank of its pipeline stage: coordinate 0 on every mesh dim but pp.
bool first_of_stage(Trainer& t) {
  const auto& dims = t.mesh().dim_names();
  const auto& coord = t.mesh().coordinate();
  for (size_t d = 0; d < dims.size(); ++d)
    if (dims[d] != "pp" && coord[d] != 0) return false;
  return true;
}

}  // namespace

void save_moe_buffers(Trainer& t, SaveSink& sink) {
  if (!first_of_stage(t)) return;
  for (auto& [name, block] : local_blocks(t)) sink.whole(kGroup, name, block->expert_bias);
}

std::function<void()> stage_moe_buffers(Trainer& t, LoadSource& source) {
  std::vector<std::pair<MoEImpl*, torch::Tensor>> staged;
  std::string missing;
  for (auto& [name, block] : local_blocks(t)) {
    torch::Tensor v = source.whole(kGroup, name, block->expert_bias);
    if (v.defined()) {
      staged.emplace_back(block, v);
    } else if (missing.empty()) {
      missing = name;
    }
  }
  const bool warn = !missing.empty() && t.model_args().moe_bias_update_coeff > 0 && t.is_writer();
  return [staged, warn, missing] {
    if (warn) {
      std::fprintf(stderr, "titan: checkpoint: WARNING no %s (a checkpoint from before expert biases were saved): "
                   "the expert biases restart at zero\n", missing.c_str());
    }
    torch::NoGradGuard no_grad;
    for (auto& [block, v] : staged) {
      block->expert_bias.copy_(v.view_as(block->expert_bias));
      block->tokens_per_expert.zero_();  // a checkpoint is taken at a step boundary, after the update
    }
  };
}

}  // namespace titan
