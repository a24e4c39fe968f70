// DeviceMesh: the job's ranks laid out as an N-dim grid with named dims, one Communicator
// per dim (mesh["tp"]) and per flattened set of dims (dp_shard x cp -> "fsdp"), and this
// rank's coordinates. Built by ParallelDims::build_mesh; used by FSDP/TP/PP/DDP and the
// trainer (loss averaging, data loader slicing).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/world.h"

namespace titan {

class DeviceMesh {
 public:
  // Global rank g sits at the row-major coordinate of g in `shape` (the last dim varies
  // fastest, so it holds neighbouring ranks). The product of `shape` must equal the world
  // size. Every rank of the job constructs the mesh with the same arguments; it creates
  // this rank's group along every dim (size-1 dims give size-1 groups, which cost nothing).
  DeviceMesh(std::shared_ptr<World> world, std::vector<std::string> dim_names,
             std::vector<int64_t> shape);

  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  const std::vector<std::string>& dim_names() const { return names_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size() const;  // all ranks of the mesh
  // Size of a dim or of a flattened group.
  int64_t size(const std::string& name) const;
  // This rank's coordinate in every dim.
  const std::vector<int64_t>& coordinate() const { return coord_; }
  // This rank's index along a dim or within a flattened group (its rank in that group).
  int64_t coordinate(const std::string& name) const;
  // Global rank at a full coordinate.
  int rank_at(const std::vector<int64_t>& coordinate) const;

  bool has(const std::string& name) const { return groups_.count(name) != 0; }
  // The Communicator of a dim or a flattened group; a titan::Error lists the known names.
  const std::shared_ptr<Communicator>& operator[](const std::string& name) const;

  // Makes one group of several dims (any subset, taken in mesh order; group rank is the
  // row-major index over them) and registers it under `name`. Every rank calls it alike.
  const std::shared_ptr<Communicator>& flatten(const std::vector<std::string>& dims,
                                               const std::string& name);
  // Another name for an existing group (e.g. TorchTitan's "dp_shard_cp" for "fsdp").
  void alias(const std::string& existing, const std::string& name);
  // Global ranks of this rank's group along `dims`, in group-rank order.
  std::vector<int> group_ranks(const std::vector<std::string>& dims) const;

  const std::shared_ptr<World>& world() const { return world_; }
  // "pp=1 x dp_replicate=1 x dp_shard=2 x cp=1 x tp=2, coordinate [0, 0, 1, 0, 1]".
  std::string to_string() const;

 private:
  int64_t dim_index(const std::string& dim) const;

  std::shared_ptr<World> world_;
  std::vector<std::string> names_;
  std::vector<int64_t> shape_;
  std::vector<int64_t> coord_;
  std::map<std::string, std::shared_ptr<Communicator>> groups_;
  std::map<std::string, std::vector<std::string>> group_dims_;  // dims behind each group
};

}  // namespace titan
