// Unit tests of ParallelDims validation and of a one-process DeviceMesh.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/error.h"
#include "tests/error_of.h"
#include "parallel/parallel_dims.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

std::string config_error_of(ParallelDims d) {
  return error_of([&] { d.validate(); }, ErrorKind::kConfig);
}

TEST(ParallelDims, InfersShardDegree) {
  ParallelDims d{.dp_replicate = 2, .dp_shard = -1, .cp = 1, .tp = 2, .pp = 2, .world_size = 32};
  d.validate();
  EXPECT_EQ(d.dp_shard, 4);
  EXPECT_EQ(d.dp(), 8);
  EXPECT_EQ(d.non_data_parallel_size(), 4);
  EXPECT_TRUE(d.fsdp_enabled());
  EXPECT_EQ(d.mesh_shape(), (std::vector<int64_t>{2, 2, 4, 1, 2}));
}

TEST(ParallelDims, WrongProductShowsProductAndWorldSize) {
  ParallelDims d{.dp_replicate = 1, .dp_shard = 2, .cp = 1, .tp = 4, .pp = 1, .world_size = 4};
  std::string msg = config_error_of(d);
  EXPECT_NE(msg.find("= 8, but the world size is 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor_parallel_degree (4)"), std::string::npos) << msg;
}

TEST(ParallelDims, CannotInferWhenOthersDoNotDivide) {
  ParallelDims d{.dp_replicate = 1, .dp_shard = -1, .cp = 1, .tp = 3, .pp = 1, .world_size = 4};
  EXPECT_NE(config_error_of(d).find("does not divide the world size 4"), std::string::npos);
  d.tp = 0;
  EXPECT_NE(config_error_of(d).find("tensor_parallel_degree: expected >= 1"), std::string::npos);
}

TEST(DeviceMesh, OneProcessMeshHasEveryGroup) {
  CommOptions o;
  auto world = init_distributed(o);
  ParallelDims d;
  auto mesh = d.build_mesh(world);
  for (const char* name : {"pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "fsdp", "loss",
                           "dp_shard_cp", "dp_cp"}) {
    ASSERT_TRUE(mesh->has(name)) << name;
    EXPECT_EQ((*mesh)[name]->size(), 1);
  }
  EXPECT_EQ((*mesh)["tp"]->name(), "tp");
  EXPECT_EQ(mesh->coordinate(), (std::vector<int64_t>{0, 0, 0, 0, 0}));
  try {
    (*mesh)["ep"];
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no dim or group 'ep'"), std::string::npos);
  }
  ParallelDims wrong{.dp_shard = 2, .world_size = 1};
  EXPECT_THROW(wrong.build_mesh(world), Error);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
