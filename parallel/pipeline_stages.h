// How a model's layers split into pipeline stages (TorchTitan's keys and meanings): the
// number of stages and, per stage, the transformer layers it runs plus whether it holds the
// embedding (first stage) or the final norm and output (last stage). Used by the trainer's
// pipeline plan (trainer/step/pipeline_model.h) and by its tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace titan {

struct StageLayers {
  int64_t begin = 0, end = 0;  // transformer layers [begin, end)
  bool embedding = false;      // first stage
  bool output = false;         // last stage: final norm and output projection
};

struct PipelineSplitOptions {
  int64_t degree = 1;             // pipeline_parallel_degree (ranks)
  int64_t layers_per_stage = -1;  // pipeline_parallel_layers_per_stage; <= 0: unset
  // The embedding (output) counts as this many layers on the first (last) stage, so that
  // stage gets that many fewer transformer layers.
  int64_t first_stage_less_layers = 1;
  int64_t last_stage_less_layers = 1;
  bool single_stage_schedule = true;  // GPipe / 1F1B: one stage per rank
};

// Stages: ceil((layers + first_less + last_less) / layers_per_stage) when layers_per_stage is
// set, else one per rank (single-stage schedules) or two per rank. Config errors when the
// count does not divide over the ranks or a single-stage schedule would get several.
int64_t pipeline_num_stages(int64_t n_layers, const PipelineSplitOptions& o);

// Every stage counts layers + first_less + last_less "effective" layers evenly (the first
// stages take one more when they do not divide); the first and last stage give up
// first_less / last_less of theirs to the embedding and output. A first or last stage may
// hold no transformer layer; a middle one must hold one. Config errors otherwise.
std::vector<StageLayers> split_stages(int64_t n_layers, int64_t num_stages, const PipelineSplitOptions& o);

}  // namespace titan
