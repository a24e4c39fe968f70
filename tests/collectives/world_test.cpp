// Unit tests of a one-process job (no launcher): World, options checks, size-1 groups.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "collectives/launch_env.h"
#include "collectives/world.h"
#include "common/error.h"

namespace titan {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class SingleProcess : public ::testing::TestWithParam<std::string> {};

TEST_P(SingleProcess, OpsOnAOneRankWorldAreLocal) {
  CommOptions o;
  o.backend = GetParam();
  auto world = init_distributed(o);
  ASSERT_EQ(world->rank(), 0);
  ASSERT_EQ(world->size(), 1);
  auto& comm = world->comm();
  EXPECT_EQ(comm->name(), "world");
  EXPECT_EQ(comm->backend(), GetParam());
  auto t = torch::arange(6, torch::kFloat);
  comm->all_reduce(t, ReduceOp::kAvg)->wait();
  EXPECT_TRUE(torch::equal(t, torch::arange(6, torch::kFloat)));
  auto out = torch::empty({6});
  comm->all_gather(out, t)->wait();
  EXPECT_TRUE(torch::equal(out, t));
  comm->reduce_scatter(out, t)->wait();
  EXPECT_TRUE(torch::equal(out, t));
  comm->broadcast(t, 0)->wait();
  comm->barrier()->wait();
  auto g = world->new_group({0}, "solo");
  EXPECT_EQ(g->size(), 1);
  EXPECT_EQ(g->name(), "solo");
}

TEST_P(SingleProcess, BadArgumentsGiveClearErrors) {
  CommOptions o;
  o.backend = GetParam();
  auto world = init_distributed(o);
  auto& comm = world->comm();
  auto in = torch::zeros({4});
  auto out = torch::zeros({5});
  EXPECT_NE(error_of([&] { comm->all_gather(out, in); }).find("expected group size 1 x in 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { comm->all_reduce(torch::zeros({2}, torch::kBool)); })
                .find("cannot be reduced"),
            std::string::npos);
  EXPECT_NE(error_of([&] { comm->broadcast(in, 3); }).find("root 3 out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { world->new_group({0, 1}, "too_big"); }).find("outside the job"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, SingleProcess, ::testing::Values("mpi", "gloo"));

TEST(CommOptions, ValidationNamesTheKey) {
  CommOptions o;
  o.bucket_cap_mb = 0;
  EXPECT_NE(error_of([&] { validate(o); }).find("comm.bucket_cap_mb"), std::string::npos);
  o = CommOptions();
  o.backend = "nccl";
  std::string msg = error_of([&] { init_distributed(o); });
  EXPECT_NE(msg.find("unknown backend \"nccl\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("gloo, mpi"), std::string::npos) << msg;
}

TEST(LaunchEnv, ReadsTitanVariables) {
  setenv("TITAN_RANK", "2", 1);
  setenv("TITAN_WORLD_SIZE", "4", 1);
  setenv("TITAN_RUN_ID", "abc", 1);
  LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.size, 4);
  EXPECT_EQ(e.job_id, "abc");
  setenv("TITAN_RANK", "4", 1);
  EXPECT_NE(error_of([] { detect_launch_env(); }).find("rank 4 of 4"), std::string::npos);
  unsetenv("TITAN_RANK");
  unsetenv("TITAN_WORLD_SIZE");
  unsetenv("TITAN_RUN_ID");
}

}  // namespace
}  // namespace titan
