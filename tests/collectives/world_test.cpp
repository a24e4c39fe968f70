// Unit tests of a one-process job (no launcher): World, options checks, size-1 groups, and
// the gloo rendezvous choice with the launcher variables behind it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <optional>

#include <torch/torch.h>

#include "collectives/gloo_store.h"
#include "collectives/launch_env.h"
#include "collectives/world.h"
#include "common/error.h"
#include "tests/error_of.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

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

// The gloo rendezvous choice (collectives/gloo_store.h) and the launcher variables that feed
// it: every failure here must come before any wait on a peer.

// Sets variables for one test and restores what was there before.
class EnvGuard {
 public:
  EnvGuard(std::map<std::string, std::string> vars) {
    static const char* const kAll[] = {
        "TITAN_RANK",       "TITAN_WORLD_SIZE",          "TITAN_RUN_ID",
        "TITAN_MASTER_ADDR", "TITAN_MASTER_PORT",        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_orte_num_nodes",
        "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_ess_base_jobid"};
    for (const char* k : kAll) {
      const char* v = std::getenv(k);
      saved_[k] = v ? std::optional<std::string>(v) : std::nullopt;
      unsetenv(k);
    }
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  ~EnvGuard() {
    for (const auto& [k, v] : saved_) {
      if (v)
        setenv(k.c_str(), v->c_str(), 1);
      else
        unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(GlooRendezvous, TitanMasterVariablesChooseATcpStore) {
  EnvGuard g({{"TITAN_RANK", "1"}, {"TITAN_WORLD_SIZE", "2"}, {"TITAN_MASTER_ADDR", "node7"}});
  LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.master_host, "node7");
  EXPECT_EQ(e.master_port, kDefaultMasterPort);
  GlooRendezvousPlan p = plan_gloo_rendezvous(CommOptions(), e);
  EXPECT_TRUE(p.tcp);
  EXPECT_EQ(p.where, "TCP store at node7:29500 (from TITAN_MASTER_ADDR, default port 29500)");
  setenv("TITAN_MASTER_PORT", "70000", 1);
  EXPECT_NE(error_of([] { detect_launch_env(); }).find("TITAN_MASTER_PORT=\"70000\" is not a TCP port"),
            std::string::npos);
}

TEST(GlooRendezvous, FolderOrJobIdChooseAFileStore) {
  EnvGuard g({{"TITAN_RANK", "0"}, {"TITAN_WORLD_SIZE", "2"}, {"TITAN_RUN_ID", "r1"}});
  LaunchEnv e = detect_launch_env();
  GlooRendezvousPlan p = plan_gloo_rendezvous(CommOptions(), e);
  EXPECT_FALSE(p.tcp);
  EXPECT_EQ(p.dir, "/tmp/titan-gloo-r1");
  EXPECT_TRUE(p.owns_dir);
  CommOptions shared;
  shared.rendezvous_dir = "/shared/rdzv";
  p = plan_gloo_rendezvous(shared, e);
  EXPECT_EQ(p.dir, "/shared/rdzv");
  EXPECT_FALSE(p.owns_dir);  // the user's folder is never removed
  // Two ways to meet asked for at once: refused, not one silently ignored.
  setenv("TITAN_MASTER_ADDR", "node7", 1);
  e = detect_launch_env();
  EXPECT_NE(error_of([&] { plan_gloo_rendezvous(shared, e); })
                .find("both comm.rendezvous_dir (/shared/rdzv) and TITAN_MASTER_ADDR (node7)"),
            std::string::npos);
  unsetenv("TITAN_MASTER_ADDR");
  unsetenv("TITAN_RUN_ID");
  e = detect_launch_env();
  EXPECT_NE(error_of([&] { plan_gloo_rendezvous(CommOptions(), e); })
                .find("set comm.rendezvous_dir, TITAN_MASTER_ADDR or TITAN_RUN_ID"),
            std::string::npos);
}

TEST(GlooRendezvous, OpenMpiAcrossNodesUsesTheLauncherHost) {
  EnvGuard g({{"OMPI_COMM_WORLD_RANK", "3"},
              {"OMPI_COMM_WORLD_SIZE", "8"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
              {"OMPI_MCA_ess_base_jobid", "1223950337"},
              {"OMPI_MCA_orte_hnp_uri",
               "1223950336.0;tcp://10.1.2.3,192.168.0.9:50463;tcp6://[fd00::2]:46097"}});
  LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.master_host, "10.1.2.3");
  EXPECT_EQ(e.master_port, kOmpiPortBase + 1223950337 % kOmpiPortSpan);
  EXPECT_NE(e.master_source.find("port from job id"), std::string::npos);
  setenv("TITAN_MASTER_PORT", "31000", 1);
  EXPECT_EQ(detect_launch_env().master_port, 31000);
  // One node, no port asked for: the /tmp file store, as before.
  unsetenv("TITAN_MASTER_PORT");
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 1);
  EXPECT_EQ(detect_launch_env().master_host, "");
  // Across nodes with no launcher address: a clear error, not a file store per node.
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  unsetenv("OMPI_MCA_orte_hnp_uri");
  EXPECT_NE(error_of([] { detect_launch_env(); })
                .find("the job spans several nodes and no Open MPI launcher address"),
            std::string::npos);
}

TEST(GlooRendezvous, PortWithoutAddressOutsideOpenMpiIsRefused) {
  EnvGuard g({{"TITAN_RANK", "0"}, {"TITAN_WORLD_SIZE", "2"}, {"TITAN_MASTER_PORT", "29555"}});
  EXPECT_NE(error_of([] { detect_launch_env(); })
                .find("TITAN_MASTER_PORT is set without TITAN_MASTER_ADDR"),
            std::string::npos);
}

// Rank 0 fails at once, before any peer could wait on it.
TEST(GlooRendezvous, RankZeroRefusesAMasterAddressOfAnotherHost) {
  // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never a local address.
  EnvGuard g({{"TITAN_RANK", "0"}, {"TITAN_WORLD_SIZE", "2"}, {"TITAN_MASTER_ADDR", "192.0.2.77"}});
  CommOptions o;
  o.backend = "gloo";
  const std::string msg = error_of([&] { init_distributed(o); });
  EXPECT_NE(msg.find("master host '192.0.2.77'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not an address of rank 0's host"), std::string::npos) << msg;
}

TEST(GlooRendezvous, RankZeroNamesABusyPort) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  {
    EnvGuard g({{"TITAN_RANK", "0"},
                {"TITAN_WORLD_SIZE", "2"},
                {"TITAN_MASTER_ADDR", "127.0.0.1"},
                {"TITAN_MASTER_PORT", port}});
    CommOptions o;
    o.backend = "gloo";
    o.init_timeout_seconds = 2;
    const std::string msg = error_of([&] { init_distributed(o); });
    EXPECT_NE(msg.find("rank 0 cannot serve on port " + port), std::string::npos) << msg;
  }
  close(fd);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
