// The context-parallel plan on a model (trainer/step/parallelize.h apply_context_parallel,
// parallel/context_parallel.h): causal load balancing of the sequence and the RoPE rows, and its
// errors for input it cannot split. The numbers themselves are proven by loss parity
// (tests/parallel/mpi_tests.cmake, parallel_loss_parity_context_parallel_*).
#include <gtest/gtest.h>

#include <string>

#include "collectives/sim_backend.h"
#include "collectives/world.h"
#include "common/error.h"
#include "parallel/context_parallel.h"
#include "trainer/config/config_loader.h"
#include "trainer/step/parallelize.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

JobConfig debug_config(int64_t seq_len) {
  return load_job_config({"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                          "--training.seq_len", std::to_string(seq_len)});
}

Transformer small_model(int64_t seq_len) {
  ModelArgs a = model_flavor("qwen3", "debugmodel");
  a.vocab_size = 64;
  Transformer m(a, seq_len, torch::TensorOptions().dtype(torch::kFloat32));
  m->init_weights(0);
  return m;
}

// rank 0 of a 2-rank sim group as the cp dim.
std::shared_ptr<Communicator> sim_cp_group() {
  set_sim_world(2, 0);
  CommOptions o;
  o.backend = "sim";
  static std::shared_ptr<World> world = init_distributed(o);
  return world->comm();
}

std::string config_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    return e.what();
  }
  return "(no error)";
}

TEST(ContextParallelPlan, EachRankHoldsChunksIAnd2cpMinus1MinusI) {
  auto x = torch::arange(16).view({1, 16});
  // cp 4: 8 chunks of 2 tokens; rank 1 holds chunks 1 and 6.
  EXPECT_TRUE(torch::equal(cp_shard_sequence(x, 1, 4, 1), torch::tensor({2, 3, 12, 13}).view({1, 4})));
  // Over all ranks every position is held exactly once.
  std::vector<torch::Tensor> parts;
  for (int64_t r = 0; r < 4; ++r) parts.push_back(cp_shard_sequence(x, 1, 4, r));
  EXPECT_TRUE(torch::equal(std::get<0>(torch::cat(parts, 1).sort(1)), x));
}

TEST(ContextParallelPlan, RopeRowsFollowTheSequenceChunks) {
  const int64_t seq = 32;
  Transformer model = small_model(seq);
  const RopeTables full = model->rope;
  apply_context_parallel(model, *sim_cp_group(), debug_config(seq));
  // Rank 0 of cp 2: positions 0-7 and 24-31.
  auto want = torch::cat({full.cos.narrow(0, 0, 8), full.cos.narrow(0, 24, 8)});
  EXPECT_TRUE(torch::equal(model->rope.cos, want));
  for (auto& block : model->layers) EXPECT_TRUE(static_cast<bool>(block->attention->attention_fn));
}

TEST(ContextParallelPlan, BadInputNamesTheKeys) {
  EXPECT_NE(config_error([] { check_context_parallel(34, 2); })
                .find("training.seq_len (34) must be divisible by 2 x parallelism.context_parallel_degree"),
            std::string::npos);
  // An attention another plan already replaced cannot be split again.
  Transformer model = small_model(32);
  model->layers[1]->attention->attention_fn = [](const torch::Tensor& q, const torch::Tensor&, const torch::Tensor&,
                                                 double) { return q; };
  const std::string e = config_error([&] { apply_context_parallel(model, *sim_cp_group(), debug_config(32)); });
  EXPECT_NE(e.find("parallelism.context_parallel_degree (2): layer 1 has no causal attention"), std::string::npos) << e;
  JobConfig bad = debug_config(32);
  bad.parallelism.context_parallel_rotate_method = "ring";
  EXPECT_NE(config_error([&] { apply_context_parallel(model, *sim_cp_group(), bad); })
                .find("parallelism.context_parallel_rotate_method"),
            std::string::npos);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
