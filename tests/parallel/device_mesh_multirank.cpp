// Multi-rank DeviceMesh tests under mpirun with 4 ranks: a 2x2 mesh (dp_shard x tp) gives
// the right sums on its row and column groups, flattened groups and coordinates.
#include <torch/torch.h>

#include "parallel/parallel_dims.h"
#include "tests/collectives/multirank_main.h"

namespace titan {
namespace {

using titan::testing::world;

std::shared_ptr<World> shared_world(const std::string& mode) {
  return titan::testing::worlds().at(mode);
}

int64_t sum_over(const std::shared_ptr<Communicator>& c, int64_t value) {
  auto t = torch::full({3}, value, torch::kLong);
  c->all_reduce(t)->wait();
  return t[0].item<int64_t>();
}

TEST(DeviceMesh, TwoByTwoRowAndColumnSums) {
  ASSERT_EQ(world().size(), 4);
  for (const std::string mode : {"fused", "separate"}) {
    ParallelDims d{.dp_replicate = 1, .dp_shard = 2, .cp = 1, .tp = 2, .pp = 1, .world_size = 4};
    auto mesh = d.build_mesh(shared_world(mode));
    const int g = world().rank();
    // Rank g = 2 * dp_shard + tp: tp groups are rows {0,1},{2,3}; dp_shard columns {0,2},{1,3}.
    EXPECT_EQ(mesh->coordinate("tp"), g % 2);
    EXPECT_EQ(mesh->coordinate("dp_shard"), g / 2);
    EXPECT_EQ(mesh->coordinate(), (std::vector<int64_t>{0, 0, g / 2, 0, g % 2}));
    EXPECT_EQ((*mesh)["tp"]->global_ranks(), (std::vector<int>{g / 2 * 2, g / 2 * 2 + 1}));
    EXPECT_EQ((*mesh)["dp_shard"]->global_ranks(), (std::vector<int>{g % 2, g % 2 + 2}));
    EXPECT_EQ(sum_over((*mesh)["tp"], g), g / 2 * 2 + g / 2 * 2 + 1) << mode;
    EXPECT_EQ(sum_over((*mesh)["dp_shard"], g), g % 2 + g % 2 + 2) << mode;
    // dp = dp_replicate x dp_shard is the column too; fsdp = dp_shard x cp as well.
    EXPECT_EQ(sum_over((*mesh)["dp"], g), g % 2 + g % 2 + 2) << mode;
    EXPECT_EQ(sum_over((*mesh)["fsdp"], g), g % 2 + g % 2 + 2) << mode;
    EXPECT_EQ(sum_over((*mesh)["pp"], g), g);
    EXPECT_EQ(mesh->size("loss"), 2);
    // Flattening both dims gives the whole job.
    auto& all = mesh->flatten({"tp", "dp_shard"}, "all");
    EXPECT_EQ(all->size(), 4);
    EXPECT_EQ(all->rank(), g);
    EXPECT_EQ(sum_over(all, g), 6);
  }
}

TEST(DeviceMesh, FourDimMeshWithReplicas) {
  // pp=1, dp_replicate=2, dp_shard=1, cp=2, tp=1: rank g = 2 * dp_replicate + cp.
  ParallelDims d{.dp_replicate = 2, .dp_shard = 1, .cp = 2, .tp = 1, .pp = 1, .world_size = 4};
  auto mesh = d.build_mesh(shared_world("fused"));
  const int g = world().rank();
  EXPECT_EQ(mesh->coordinate("dp_replicate"), g / 2);
  EXPECT_EQ(mesh->coordinate("cp"), g % 2);
  EXPECT_EQ(sum_over((*mesh)["cp"], 1), 2);
  EXPECT_EQ(sum_over((*mesh)["fsdp"], g), g / 2 * 4 + 1);  // dp_shard x cp = the cp pair
  EXPECT_EQ(sum_over((*mesh)["dp"], g), g % 2 * 2 + 2);    // replicas {g%2, g%2+2}
  EXPECT_EQ(sum_over((*mesh)["loss"], 1), 4);
  EXPECT_EQ((*mesh)["loss"].get(), (*mesh)["dp_cp"].get());
}

}  // namespace
}  // namespace titan

int main(int argc, char** argv) { return titan::testing::run_multirank_main(argc, argv); }
