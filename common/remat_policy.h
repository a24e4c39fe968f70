// Named-tensor recompute policies (MaxText's remat_policy): for each tensor a transformer block
// names, whether its forward value is saved in device memory, offloaded to host memory, or
// recomputed in backward. Read from the activation_checkpoint config keys by the trainer and
// applied by parallel/activation_checkpoint.h (it lives here, below every layer, so that the
// config can check the names); the simulator's refusal advice
// (trainer/simulate/remat_advice.h) sizes each named tensor to say which policy would fit.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace titan {

// The tensors MaxText names with checkpoint_name inside a decoder layer, in the block's
// forward order. qkv_proj (MaxText's fused q/k/v product) names query, key and value
// together here (titan's blocks compute them as three products); mlpwi names both gated
// inputs (mlpwi_0 and mlpwi_1), or the one input of a non-gated MLP.
enum class RematTensor : int {
  kDecoderLayerInput,
  kQueryProj,
  kKeyProj,
  kValueProj,
  kContext,  // attention's output, before the out projection
  kOutProj,
  kMlpWi0,
  kMlpWi1,  // the gated MLP's second input product (w3)
  kMlpWo,
  kCount
};
constexpr int kRematTensors = static_cast<int>(RematTensor::kCount);
const char* remat_tensor_name(RematTensor t);

enum class RematAction : uint8_t { kRemat, kDevice, kOffload };

struct RematPolicy {
  std::string name;  // "minimal", ..., "custom"
  std::array<RematAction, kRematTensors> action{};
  RematAction of(RematTensor t) const { return action[static_cast<size_t>(t)]; }
  bool offloads() const;
  // "device: decoder_layer_input, query_proj; offload: context; recomputed: the rest"
  std::string describe() const;
};

// The policies MaxText names (remat_policy): minimal, minimal_offloaded, save_dot_with_context_except_mlp,
// save_dot_except_mlpwi, save_dot_except_mlp, save_qkv_proj, qkv_proj_offloaded, full; or
// "custom" with comma lists of the names above (decoder_layer_input, query_proj, key_proj,
// value_proj, qkv_proj, context, out_proj, mlpwi, mlpwi_0, mlpwi_1, mlpwo) saved on device
// and offloaded to host; a name in neither is recomputed. decoder_layer_input is the
// checkpointed block's input, which the recompute needs: it stays on device unless
// offloaded. Unknown policies or names, a name in both lists, or lists given to a named
// policy are config errors naming the key.
RematPolicy remat_policy(const std::string& name, const std::string& save_on_device = "",
                         const std::string& offload_to_host = "");
// Every named policy, least recompute first (for the refusal's advice).
const std::vector<std::string>& named_remat_policies();

// Which named tensor the n-th (0-based) linear product of a block's forward is, for a block
// with `attention_linears` products in its attention (q, k, v, out) and `mlp_linears` in its
// MLP (inputs first, the output product last).
RematTensor linear_remat_tensor(int64_t n, int64_t attention_linears, int64_t mlp_linears);

}  // namespace titan
