// MoE routing state that is not a parameter but shapes training: each MoE block's expert_bias
// (TorchTitan's auxiliary-loss-free balancing, moe.h), saved with the model so that a resumed
// run routes as the uninterrupted one would (TorchTitan keeps it as a persistent buffer).
// The block's tokens_per_expert counter is not saved: update_expert_bias zeroes it after every
// optimizer step, so it is zero wherever a checkpoint is taken (a load zeroes it too).
// Stored as "model_buffers/layers.N.moe.expert_bias", whole, fp32 (no export dtype: it is a
// routing offset, not a weight). Every rank holds the same value (the update uses loads summed
// over data-parallel ranks), so only the first rank of each pipeline stage writes it; every
// rank reads it, under any mesh. Older checkpoints without it load with the bias left at zero.
#pragma once

#include <functional>

namespace titan {

class Trainer;
struct SaveSink;
struct LoadSource;

void save_moe_buffers(Trainer& trainer, SaveSink& sink);
// Reads into staging tensors; the returned function applies them.
std::function<void()> stage_moe_buffers(Trainer& trainer, LoadSource& source);

}  // namespace titan
