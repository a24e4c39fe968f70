// ParallelDims: the parallelism degrees of a job ([parallelism] in the config), their
// validation against the world size, and the DeviceMesh they imply. Used by the trainer
// (and by the simulator for a simulated world size).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/device_mesh.h"

namespace titan {

struct ParallelDims {
  int64_t dp_replicate = 1;  // data_parallel_replicate_degree (DDP / HSDP replicas)
  int64_t dp_shard = -1;     // data_parallel_shard_degree (FSDP); -1: what the others leave
  int64_t cp = 1;            // context_parallel_degree
  int64_t tp = 1;            // tensor_parallel_degree
  int64_t pp = 1;            // pipeline_parallel_degree
  int64_t world_size = 1;

  // Resolves dp_shard = -1 and checks dp_replicate * dp_shard * cp * tp * pp == world_size;
  // a config error names the degrees, their product and the world size.
  void validate();

  // Mesh dims in TorchTitan's order, outermost first: pp, dp_replicate, dp_shard, cp, tp
  // (tp innermost: tensor-parallel peers are neighbouring ranks, e.g. on one host).
  static const std::vector<std::string>& dim_names();
  std::vector<int64_t> mesh_shape() const;

  // The mesh over all five dims (size-1 dims included, so mesh["tp"] always exists) plus
  // flattened groups: "dp" = dp_replicate x dp_shard (data loading, DDP),
  // "fsdp" = dp_shard x cp (parameter sharding; alias "dp_shard_cp"),
  // "loss" = dp_replicate x dp_shard x cp (loss / grad-norm averaging; alias "dp_cp").
  // Calls validate(); world->size() must equal world_size.
  std::shared_ptr<DeviceMesh> build_mesh(std::shared_ptr<World> world);

  int64_t dp() const { return dp_replicate * dp_shard; }
  bool dp_replicate_enabled() const { return dp_replicate > 1; }
  bool dp_shard_enabled() const { return dp_shard > 1; }
  bool fsdp_enabled() const { return dp_shard * cp > 1; }
  bool cp_enabled() const { return cp > 1; }
  bool tp_enabled() const { return tp > 1; }
  bool pp_enabled() const { return pp > 1; }
  // Ranks that see the same data: every dim that is not data parallel.
  int64_t non_data_parallel_size() const { return cp * tp * pp; }
  std::string to_string() const;
};

}  // namespace titan
