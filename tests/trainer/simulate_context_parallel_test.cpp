// Context parallel in simulation (parallel/context_parallel.h through the trainer's own step on
// the meta device): the ring's attention blocks carry 1/cp of the causal attention (load
// balancing), the K/V transfers are the ring's sends and receives on the cp group, and in fused
// mode they overlap the blocks' attention where blocking (separate) transfers cannot; the
// all-gather rotater's gathers overlap the local blocks.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "trainer/config/config_loader.h"
#include "trainer/simulate/simulate.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

constexpr int64_t kLayers = 4, kSeq = 1024, kCp = 4;

// A narrow Qwen3 on 64 simulated chips, CP 4 x FSDP 16.
JobConfig cp_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_8b.toml",
                                   "--job.dump_folder", "/tmp/titan_simulate_cp_test",
                                   "--model.n_layers", std::to_string(kLayers), "--model.dim", "512",
                                   "--model.ffn_dim", "1536", "--model.n_heads", "8", "--model.n_kv_heads", "4",
                                   "--model.head_dim", "64", "--model.vocab_size", "8192",
                                   "--training.seq_len", std::to_string(kSeq), "--training.local_batch_size", "1",
                                   "--simulation.num_chips", "64", "--simulation.device", "tpu-v5p",
                                   "--parallelism.context_parallel_degree", std::to_string(kCp),
                                   "--activation_checkpoint.mode", "none"};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

double exposed(const SimulationResult& r, const std::string& kind) {
  for (const auto& c : r.exposed_comm_by_kind)
    if (c.category == kind) return c.seconds;
  return 0;
}

TEST(SimulateContextParallel, RingBlocksCarryOneCpthOfTheCausalAttention) {
  RecordedStep rec = record_step(cp_config({"--parallelism.context_parallel_rotate_method", "alltoall"}));
  EXPECT_EQ(rec.op_counts.count("titan::attention"), 0u) << "the model's own attention ran under CP";
  // Rank 0 holds chunks 0 and 2cp-1: 3 kept pairs with its own K/V, then 2 with each other rank's.
  const int64_t blocks = 3 + 2 * (kCp - 1);
  EXPECT_EQ(rec.op_counts["titan::ring_attention_block"], kLayers * blocks);
  EXPECT_EQ(rec.op_counts["titan::ring_attention_block_backward"], kLayers * blocks);
  // Causal work (a diagonal block counts half) adds to the whole sequence's over cp.
  double work = 0;
  for (const auto& e : rec.trace.events()) {
    if (e.type != devices::TraceEvent::Type::kCompute || e.op.name != "titan::ring_attention_block") continue;
    work += static_cast<double>(e.op.attn.q_len * e.op.attn.kv_len) * (e.op.attn.causal ? 0.5 : 1.0);
  }
  EXPECT_DOUBLE_EQ(work, kLayers * 0.5 * kSeq * kSeq / kCp);
  // K/V rotated cp-1 times in forward and backward; their gradients shifted cp times.
  int64_t sends = 0, recvs = 0;
  for (const auto& c : rec.calls) {
    if (c.group != "cp") continue;
    sends += c.op == "send";
    recvs += c.op == "recv";
  }
  EXPECT_EQ(sends, kLayers * (2 * (kCp - 1) + kCp));
  EXPECT_EQ(recvs, sends);
}

TEST(SimulateContextParallel, AllGatherMethodGathersOncePerPass) {
  RecordedStep rec = record_step(cp_config({"--parallelism.context_parallel_rotate_method", "allgather"}));
  int64_t gathers = 0, scatters = 0, p2p = 0;
  for (const auto& c : rec.calls) {
    if (c.group != "cp") continue;
    gathers += c.op == "all_gather";
    scatters += c.op == "reduce_scatter";
    p2p += c.op == "send" || c.op == "recv";
  }
  EXPECT_EQ(gathers, 2 * kLayers);  // forward, and again in backward
  EXPECT_EQ(scatters, kLayers);     // the K/V gradients home
  EXPECT_EQ(p2p, 0);
}

// The all-gather rotater issues each gather before the local (diagonal) blocks, which need only
// this rank's K/V, and waits after them (as PyTorch's does), so the gather can overlap them.
TEST(SimulateContextParallel, AllGatherOverlapsTheLocalBlocks) {
  RecordedStep rec = record_step(cp_config({"--parallelism.context_parallel_rotate_method", "allgather"}));
  std::map<int64_t, int64_t> open;  // the cp gathers issued and not yet waited on: attention ops since
  int64_t gathers = 0, overlapped = 0;
  for (const auto& e : rec.trace.events()) {
    if (e.type == devices::TraceEvent::Type::kIssue && e.collective.group == "cp" &&
        e.collective.kind == devices::CollectiveKind::kAllGather) {
      open[e.work] = 0;
      ++gathers;
    } else if (e.type == devices::TraceEvent::Type::kCompute && e.op.kind == devices::OpKind::kAttention) {
      for (auto& [work, n] : open) ++n;
    } else if (e.type == devices::TraceEvent::Type::kWait && open.count(e.work)) {
      overlapped += open[e.work] > 0;
      open.erase(e.work);
    }
  }
  EXPECT_EQ(gathers, 2 * kLayers);
  EXPECT_EQ(overlapped, gathers) << "every gather should have the local blocks' attention between issue and wait";
}

TEST(SimulateContextParallel, FusedRingOverlapsTransfersWithAttention) {
  const auto ring = std::vector<std::string>{"--parallelism.context_parallel_rotate_method", "alltoall"};
  auto fused = ring, separate = ring;
  fused.insert(fused.end(), {"--comm.collective_mode", "fused"});
  separate.insert(separate.end(), {"--comm.collective_mode", "separate"});
  const SimulationResult f = simulate(cp_config(fused), false);
  const SimulationResult s = simulate(cp_config(separate), false);
  ASSERT_GT(exposed(s, "send_recv"), 0.0);
  // Blocking transfers wait in full; posted ones run while the held chunk's attention computes.
  EXPECT_LT(exposed(f, "send_recv"), 0.5 * exposed(s, "send_recv"))
      << "fused " << exposed(f, "send_recv") << " s vs separate " << exposed(s, "send_recv") << " s";
  EXPECT_LT(f.report.step_time_s, s.report.step_time_s);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
