// The compute order of each named pipeline schedule, per rank (F, B, I, W only; sends and
// receives are inserted afterwards by insert_p2p). Used by make_pipeline_schedule.
#pragma once

#include <vector>

#include "parallel/pipeline_schedule.h"

namespace titan {

using PipeOrder = std::vector<std::vector<PipeAction>>;

// GPipe: every forward, then every backward, one stage per rank.
PipeOrder gpipe_order(int ranks, int microbatches);

// Interleaved 1F1B over `v` stages per rank in a loop (stage c x ranks + r on rank r), in the
// order of Narayanan et al. 2021 (Megatron-LM): forwards walk the rank's stages in groups of
// `ranks` micro-batches, backwards in reverse; warm-up forwards, a steady one-forward-one-
// backward phase, cool-down backwards. v = 1 is plain 1F1B (warm-up ranks - 1 - r).
// With v > 1 the micro-batches must be a multiple of the ranks.
PipeOrder interleaved_order(int ranks, int v, int microbatches);

// The interleaved order with every B split into I and W, the W deferred: a unit-cost list
// scheduler runs the F / I order and does a pending W whenever the next F or I would wait,
// or when a rank holds more than ranks - 1 - r of them.
PipeOrder interleaved_zero_bubble_order(int ranks, int v, int microbatches);

// ZB-V (Qi et al. 2024): two stages per rank in a V (rank r holds r and 2 x ranks - 1 - r),
// backward split into I and W; the list scheduler prefers I, then F (deeper stage first)
// while the rank holds fewer than 2 x ranks stage activations, and fills waits with W.
PipeOrder zero_bubble_v_order(int ranks, int microbatches);

}  // namespace titan
