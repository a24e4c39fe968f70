#include "parallel/parallel_dims.h"

#include <sstream>

#include "common/error.h"

namespace titan {

void ParallelDims::validate() {
  TITAN_CONFIG_CHECK(world_size >= 1, "parallelism: world size must be >= 1, got ", world_size);
  const struct {
    const char* key;
    int64_t value;
  } fixed[] = {{"data_parallel_replicate_degree", dp_replicate},
               {"context_parallel_degree", cp},
               {"tensor_parallel_degree", tp},
               {"pipeline_parallel_degree", pp}};
  for (const auto& f : fixed)
    TITAN_CONFIG_CHECK(f.value >= 1, "parallelism.", f.key, ": expected >= 1, got ", f.value);
  TITAN_CONFIG_CHECK(dp_shard == -1 || dp_shard >= 1,
                     "parallelism.data_parallel_shard_degree: expected -1 or >= 1, got ",
                     dp_shard);
  const int64_t others = dp_replicate * cp * tp * pp;
  if (dp_shard == -1) {
    TITAN_CONFIG_CHECK(world_size % others == 0, "parallelism: cannot infer "
                       "data_parallel_shard_degree: data_parallel_replicate_degree (",
                       dp_replicate, ") x context_parallel_degree (", cp,
                       ") x tensor_parallel_degree (", tp, ") x pipeline_parallel_degree (", pp,
                       ") = ", others, " does not divide the world size ", world_size);
    dp_shard = world_size / others;
  }
  const int64_t product = others * dp_shard;
  TITAN_CONFIG_CHECK(product == world_size, "parallelism: data_parallel_replicate_degree (",
                     dp_replicate, ") x data_parallel_shard_degree (", dp_shard,
                     ") x context_parallel_degree (", cp, ") x tensor_parallel_degree (", tp,
                     ") x pipeline_parallel_degree (", pp, ") = ", product,
                     ", but the world size is ", world_size);
}

const std::vector<std::string>& ParallelDims::dim_names() {
  static const std::vector<std::string> names = {"pp", "dp_replicate", "dp_shard", "cp", "tp"};
  return names;
}

std::vector<int64_t> ParallelDims::mesh_shape() const { return {pp, dp_replicate, dp_shard, cp, tp}; }

std::shared_ptr<DeviceMesh> ParallelDims::build_mesh(std::shared_ptr<World> world) {
  TITAN_CHECK(world, "ParallelDims::build_mesh: no World");
  TITAN_CONFIG_CHECK(world->size() == world_size, "parallelism: configured for world size ",
                     world_size, " but the job has ", world->size(), " ranks");
  validate();
  auto mesh = std::make_shared<DeviceMesh>(std::move(world), dim_names(), mesh_shape());
  mesh->flatten({"dp_replicate", "dp_shard"}, "dp");
  mesh->flatten({"dp_shard", "cp"}, "fsdp");
  mesh->alias("fsdp", "dp_shard_cp");
  mesh->flatten({"dp_replicate", "dp_shard", "cp"}, "loss");
  mesh->alias("loss", "dp_cp");
  return mesh;
}

std::string ParallelDims::to_string() const {
  std::ostringstream os;
  os << "pp=" << pp << " dp_replicate=" << dp_replicate << " dp_shard=" << dp_shard
     << " cp=" << cp << " tp=" << tp << " (world " << world_size << ")";
  return os.str();
}

}  // namespace titan
