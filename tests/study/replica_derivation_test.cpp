// Replica derivation (trainer/simulate/replica_derivation.h): a dp_replicate 1 probe derived
// from the dp_replicate 2 probe of the same layout is the dp_replicate 1 probe recorded, event
// by event (ops, sizes, data flow, collectives, handles; every pipeline segment; the storage
// resizes and where they fall; memory; FSDP's noted calls), under separate and fused
// collectives (where HSDP waits each reduce-scatter earlier and the waits move back), and the
// steps resized from either to other dp_shard degrees replay to the same figures (equal, not
// within a tolerance). A dp_replicate 2 step whose waits do not have FSDP's shape is refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
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
  std::string mode = "separate";  // collective mode
};

JobConfig at(const Layout& l, int64_t shard) {
  std::vector<std::string> a = l.args;
  a.insert(a.end(), {"--comm.collective_mode", l.mode, "--parallelism.data_parallel_shard_degree",
                     std::to_string(shard), "--simulation.num_chips", std::to_string(shard * l.others)});
  return tiny_config(a);
}

void expect_same_memory(const devices::StepMemory& a, const devices::StepMemory& b, const std::string& what) {
  for (bool fused : {false, true})
    for (bool per_use : {false, true}) {
      const devices::TraceMemory &x = a.of(fused, per_use), &y = b.of(fused, per_use);
      const std::string at = what + (fused ? " fused" : " eager") + (per_use ? " per use" : "");
      EXPECT_EQ(x.state_bytes, y.state_bytes) << at;
      EXPECT_EQ(x.peak_bytes, y.peak_bytes) << at;
      EXPECT_EQ(x.peak_temporaries, y.peak_temporaries) << at;
      EXPECT_EQ(x.peak_resized, y.peak_resized) << at;
      EXPECT_EQ(x.peak_op, y.peak_op) << at;
      EXPECT_EQ(x.parts.size(), y.parts.size()) << at;
    }
}

void expect_same_resizes(const std::vector<devices::StorageResize>& a, const std::vector<devices::StorageResize>& b,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t j = 0; j < a.size(); ++j) {
    EXPECT_TRUE(a[j].at_op == b[j].at_op && a[j].id == b[j].id && a[j].bytes == b[j].bytes)
        << what << " resize " << j << ": op " << a[j].at_op << " id " << a[j].id << " " << a[j].bytes << " bytes vs op "
        << b[j].at_op << " id " << b[j].id << " " << b[j].bytes << " bytes";
    if (a[j].at_op != b[j].at_op || a[j].id != b[j].id) return;
  }
}

// What expect_same_step leaves out: the storages, their resizes (order and op positions) and
// the memory walked over them, per pipeline rank.
void expect_same_storages(const RecordedStep& a, const RecordedStep& b, const std::string& what) {
  if (!a.pipeline) {
    EXPECT_EQ(a.trace.storages().size(), b.trace.storages().size()) << what;
    expect_same_resizes(a.trace.storage_resizes(), b.trace.storage_resizes(), what);
    return expect_same_memory(a.memory, b.memory, what);
  }
  ASSERT_TRUE(b.pipeline) << what;
  for (size_t q = 0; q < a.pipeline->ranks.size(); ++q) {
    const std::string rank = what + " rank " + std::to_string(q);
    EXPECT_EQ(a.pipeline->storages[q].size(), b.pipeline->storages[q].size()) << rank;
    expect_same_resizes(a.pipeline->storage_resizes[q], b.pipeline->storage_resizes[q], rank);
    expect_same_memory(a.pipeline->memory[q], b.pipeline->memory[q], rank);
  }
}

TEST(ReplicaDerivation, DerivedProbesAreTheRecordedOnes) {
  const std::vector<Layout> shapes = {
      {"fsdp, selective AC", {}, 1},
      {"fsdp, full AC", {"--activation_checkpoint.mode", "full"}, 1},
      {"tp 2 x fsdp", {"--parallelism.tensor_parallel_degree", "2"}, 2},
      {"fsdp, 0.5 MiB buckets", {"--comm.bucket_cap_mb", "0.5"}, 1},
      {"pp 2 1F1B",
       {"--parallelism.pipeline_parallel_degree", "2", "--activation_checkpoint.mode", "none",
        "--training.local_batch_size", "2", "--parallelism.pipeline_parallel_microbatch_size", "1"},
       2},
      {"pp 2 1F1B, selective AC",
       {"--parallelism.pipeline_parallel_degree", "2", "--training.local_batch_size", "4",
        "--parallelism.pipeline_parallel_microbatch_size", "1"},
       2},
      {"tp 2 x fsdp, full AC", {"--parallelism.tensor_parallel_degree", "2", "--activation_checkpoint.mode", "full"}, 2},
  };
  std::vector<Layout> layouts;
  for (const std::string mode : {"separate", "fused"})
    for (Layout l : shapes) {
      l.label = mode + ", " + l.label;
      l.mode = mode;
      layouts.push_back(std::move(l));
    }
  for (const Layout& l : layouts) {
    const JobConfig one = at(l, 4);
    ASSERT_TRUE(replica_derivable(one)) << l.label;
    const ProbeRecording recorded = record_probe(one);
    const ProbeRecording replicated = record_probe(with_two_replicas(one), recorded.degree);
    ASSERT_EQ(replicated.degree, recorded.degree) << l.label;
    const ProbeRecording derived = probe_without_replicas(replicated, one);
    expect_same_step(recorded.step, derived.step, l.label + " (probe)");
    expect_same_storages(recorded.step, derived.step, l.label + " (probe)");
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
      expect_same_storages(from_recorded, from_derived, what);
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

TEST(ReplicaDerivation, RefusesWaitsOfAnotherShape) {
  // Fused HSDP releases a reduce-scatter's inputs a second time just before the replica
  // all-reduce: that run of releases is what moves to the wait. Without it the step is not
  // FSDP's shape, and the derivation refuses (the study then records the probe).
  const JobConfig one = at({"fsdp", {}, 1, "fused"}, 4);
  ASSERT_TRUE(replica_derivable(one));
  ProbeRecording replicated = record_probe(with_two_replicas(one));
  auto& rs = replicated.step.trace.storage_resizes();
  // The first run of releases repeated right after itself: drop the repeat.
  bool cut = false;
  for (size_t j = 1; j < rs.size() && !cut; ++j)
    for (size_t k = 1; k <= j && j + k <= rs.size() && !cut; ++k) {
      bool repeat = true;
      for (size_t i = 0; repeat && i < k; ++i)
        repeat = rs[j + i].bytes == 0 && rs[j + i].id == rs[j - k + i].id && rs[j + i].at_op == rs[j - k + i].at_op &&
                 rs[j - k + i].bytes == 0;
      if (repeat) {
        rs.erase(rs.begin() + static_cast<std::ptrdiff_t>(j), rs.begin() + static_cast<std::ptrdiff_t>(j + k));
        cut = true;
      }
    }
  ASSERT_TRUE(cut);
  EXPECT_THROW(probe_without_replicas(replicated, one), Error);
}

}  // namespace
}  // namespace titan::study

