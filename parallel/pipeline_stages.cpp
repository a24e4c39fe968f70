#include "parallel/pipeline_stages.h"

#include "common/error.h"

namespace titan {

int64_t pipeline_num_stages(int64_t n_layers, const PipelineSplitOptions& o) {
  TITAN_CONFIG_CHECK(o.first_stage_less_layers >= 0 && o.last_stage_less_layers >= 0,
                     "parallelism.pipeline_parallel_first_stage_less_layers and last_stage_less_layers must be >= 0, "
                     "got ", o.first_stage_less_layers, " and ", o.last_stage_less_layers);
  const int64_t effective = n_layers + o.first_stage_less_layers + o.last_stage_less_layers;
  int64_t stages = o.single_stage_schedule ? o.degree : 2 * o.degree;
  if (o.layers_per_stage > 0) stages = (effective + o.layers_per_stage - 1) / o.layers_per_stage;
  TITAN_CONFIG_CHECK(stages % o.degree == 0, "parallelism.pipeline_parallel_layers_per_stage (", o.layers_per_stage,
                     ") gives ", stages, " stages for ", n_layers, " layers (+", o.first_stage_less_layers, " +",
                     o.last_stage_less_layers, " for embedding and output), which do not divide over "
                     "pipeline_parallel_degree ", o.degree);
  TITAN_CONFIG_CHECK(!o.single_stage_schedule || stages == o.degree, "parallelism.pipeline_parallel_layers_per_stage (",
                     o.layers_per_stage, ") gives ", stages, " stages, but the schedule runs one stage per rank (",
                     o.degree, " ranks); use an interleaved or zero-bubble schedule");
  return stages;
}

std::vector<StageLayers> split_stages(int64_t n_layers, int64_t num_stages, const PipelineSplitOptions& o) {
  const int64_t first = o.first_stage_less_layers, last = o.last_stage_less_layers;
  const int64_t effective = n_layers + first + last;
  TITAN_CONFIG_CHECK(num_stages >= 1 && num_stages <= effective, "pipeline: cannot split ", n_layers, " layers (+",
                     first, " +", last, " for embedding and output) into ", num_stages, " stages");
  std::vector<StageLayers> out(num_stages);
  int64_t layer = 0;
  for (int64_t s = 0; s < num_stages; ++s) {
    int64_t count = effective / num_stages + (s < effective % num_stages ? 1 : 0);
    if (s == 0) count -= first;
    if (s == num_stages - 1) count -= last;
    const bool edge = s == 0 || s == num_stages - 1;
    TITAN_CONFIG_CHECK(count >= (edge ? 0 : 1), "pipeline: cannot split ", n_layers, " layers into ", num_stages,
                       " stages with the first stage holding ", first, " and the last ", last,
                       " fewer layers: stage ", s, " would get ", count,
                       " (lower pipeline_parallel_first_stage_less_layers / last_stage_less_layers, or use fewer "
                       "stages)");
    out[s] = {layer, layer + count, s == 0, s == num_stages - 1};
    layer += count;
  }
  TITAN_CHECK(layer == n_layers, "pipeline: split covers ", layer, " of ", n_layers, " layers");
  return out;
}

}  // namespace titan
