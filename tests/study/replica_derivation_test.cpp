// Replica derivation (trainer/simulate/replica_derivation.h): a dp_replicate 1 probe derived
// from the dp_replicate 2 probe of the same layout is the dp_replicate 1 probe recorded, event
// by event (ops, sizes, data flow, collectives, handles; every pipeline segment), and the steps
// resized from either to other dp_shard degrees replay to the same figures (equal, not within a
// tolerance). Under fused collectives the two layouts record the same ops but HSDP waits for
// reduce-scatters earlier, so they are not derived: the test checks that this still holds (if
// it stops holding, fused layouts could be derived too).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "same_step.h"
#include "study/evaluate.h"
#include "study_fixture.h"
#include "trainer/simulate/replica_derivation.h"
#include "trainer/simulate/shard_notes.h"
#include "trainer/simulate/shard_resize.h"

namespace titan::study {
namespace {

using testing::expect_same_step;
using testing::tiny_config;

struct Layout {
  std::string label;
  std::vector<std::string> args;
  int64_t others;  // chips per dp_shard rank at dp_replicate 1 (tp x pp)
};

JobConfig at(const Layout& l, int64_t shard) {
  std::vector<std::string> a = l.args;
  a.insert(a.end(), {"--comm.collective_mode", "separate", "--parallelism.data_parallel_shard_degree",
                     std::to_string(shard), "--simulation.num_chips", std::to_string(shard * l.others)});
  return tiny_config(a);
}

TEST(ReplicaDerivation, DerivedProbesAreTheRecordedOnes) {
  const std::vector<Layout> layouts = {
      {"fsdp, selective AC", {}, 1},
      {"fsdp, full AC", {"--activation_checkpoint.mode", "full"}, 1},
      {"tp 2 x fsdp", {"--parallelism.tensor_parallel_degree", "2"}, 2},
      {"fsdp, 0.5 MiB buckets", {"--comm.bucket_cap_mb", "0.5"}, 1},
      {"pp 2 1F1B",
       {"--parallelism.pipeline_parallel_degree", "2", "--activation_checkpoint.mode", "none",
        "--training.local_batch_size", "2", "--parallelism.pipeline_parallel_microbatch_size", "1"},
       2},
  };
  for (const Layout& l : layouts) {
    const JobConfig one = at(l, 4);
    ASSERT_TRUE(replica_derivable(one)) << l.label;
    const ProbeRecording recorded = record_probe(one);
    const ProbeRecording replicated = record_probe(with_two_replicas(one), recorded.degree);
    ASSERT_EQ(replicated.degree, recorded.degree) << l.label;
    const ProbeRecording derived = probe_without_replicas(replicated, one);
    expect_same_step(recorded.step, derived.step, l.label + " (probe)");
    // The noted FSDP calls (what resizing follows) match too.
    const auto &a = probe_notes(recorded).ranks, &b = probe_notes(derived).ranks;
    ASSERT_EQ(a.size(), b.size()) << l.label;
    for (size_t q = 0; q < a.size(); ++q) {
      ASSERT_EQ(a[q].calls.size(), b[q].calls.size()) << l.label << " rank " << q;
      for (size_t c = 0; c < a[q].calls.size(); ++c) {
        EXPECT_EQ(a[q].calls[c].group, b[q].calls[c].group) << l.label << " call " << c;
        EXPECT_EQ(a[q].calls[c].position, b[q].calls[c].position) << l.label << " call " << c;
        EXPECT_EQ(a[q].calls[c].numels, b[q].calls[c].numels) << l.label << " call " << c;
      }
    }
    // Resized from either probe to other degrees: the same step, the same replay.
    for (int64_t w : {2, 8, 64}) {
      const JobConfig cfg = at(l, w);
      RecordedStep from_recorded, from_derived;
      std::string why;
      ASSERT_TRUE(resize_for_shard_degree(recorded, cfg, &from_recorded, &why)) << l.label << ": " << why;
      ASSERT_TRUE(resize_for_shard_degree(derived, cfg, &from_derived, &why)) << l.label << ": " << why;
      const std::string what = l.label + " at dp_shard " + std::to_string(w);
      expect_same_step(from_recorded, from_derived, what);
      const devices::ChipSpec chip = simulated_chip(cfg);
      const auto placement =
          devices::place_on_device(chip, cfg.simulation.num_chips, mesh_dims(from_recorded.dims), cfg.simulation.topology);
      const SimulationResult x = replay_step(cfg, from_recorded, chip, placement);
      const SimulationResult y = replay_step(cfg, from_derived, chip, placement);
      EXPECT_EQ(x.report.step_time_s, y.report.step_time_s) << what;
      EXPECT_EQ(x.report.exposed_comm_s, y.report.exposed_comm_s) << what;
      EXPECT_EQ(x.memory.total_gib(), y.memory.total_gib()) << what;
      EXPECT_EQ(x.tokens_per_s_per_chip, y.tokens_per_s_per_chip) << what;
      EXPECT_EQ(x.global_batch, y.global_batch) << what;
    }
  }
}

TEST(ReplicaDerivation, FusedCollectivesMoveWaits) {
  // The reason fused layouts are recorded: removing the replica all-reduces from the
  // dp_replicate 2 step leaves the other collectives' waits where HSDP put them.
  JobConfig one = tiny_config({"--parallelism.data_parallel_shard_degree", "4", "--simulation.num_chips", "4"});
  EXPECT_FALSE(replica_derivable(one));
  const ProbeRecording recorded = record_probe(one);
  const ProbeRecording replicated = record_probe(with_two_replicas(one), recorded.degree);
  one.comm.collective_mode = CollectiveMode::kSeparate;  // allowed here only to build the step
  const ProbeRecording derived = probe_without_replicas(replicated, one);
  const auto &x = recorded.step.trace.events(), &y = derived.step.trace.events();
  ASSERT_EQ(x.size(), y.size());
  size_t moved = 0;
  for (size_t i = 0; i < x.size(); ++i) moved += x[i].type != y[i].type ? 1 : 0;
  EXPECT_GT(moved, 0u) << "fused dp_replicate 1 and 2 steps now differ only in the replica all-reduces: "
                          "replica_derivable could allow fused collectives";
}

}  // namespace
}  // namespace titan::study
