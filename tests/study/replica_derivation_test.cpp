// Replica derivation (trainer/simulate/replica_derivation.h): a dp_replicate 1 probe derived
// from the dp_replicate 2 probe of the same layout is the dp_replicate 1 probe recorded, event
// by event (ops, sizes, data flow, collectives, handles; every pipeline segment; the storage
// resizes and where they fall; memory; FSDP's noted calls), under separate and fused
// collectives (where HSDP waits each reduce-scatter earlier and the waits move back), and the
// steps resized from either to other dp_shard degrees replay to the same figures (equal, not
// within a tolerance). A dp_replicate 2 step whose waits do not have FSDP's shape is refused.
// Mixture-of-experts layouts: without expert parallelism the experts are in their block's FSDP
// unit and the probe is derived exactly; with it no probe degree records the layout (the study
// records it whole), and on steps recorded with FSDP's notes anyway the derivation is exact
// with expert units in flight beside the blocks', and refuses fused expert units that shard
// over one rank.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "same_step.h"
#include "study/evaluate.h"
#include "study_fixture.h"
#include "trainer/model/grouped_matmul.h"
#include "trainer/simulate/replica_derivation.h"
#include "trainer/simulate/shard_notes.h"
#include "trainer/simulate/shard_resize.h"
#include "trainer/simulate/shard_sizes.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
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

// The noted FSDP calls (what resizing follows) of two probes.
void expect_same_calls(const ProbeRecording& recorded, const ProbeRecording& derived, const std::string& what) {
  const auto &a = probe_notes(recorded).ranks, &b = probe_notes(derived).ranks;
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t q = 0; q < a.size(); ++q) {
    ASSERT_EQ(a[q].calls.size(), b[q].calls.size()) << what << " rank " << q;
    for (size_t c = 0; c < a[q].calls.size(); ++c) {
      EXPECT_EQ(a[q].calls[c].group, b[q].calls[c].group) << what << " call " << c;
      EXPECT_EQ(a[q].calls[c].position, b[q].calls[c].position) << what << " call " << c;
      EXPECT_EQ(a[q].calls[c].numels, b[q].calls[c].numels) << what << " call " << c;
    }
  }
}

// Two steps of cfg's layout replayed: the same figures.
void expect_same_replay(const JobConfig& cfg, const RecordedStep& a, const RecordedStep& b, const std::string& what) {
  const devices::ChipSpec chip = simulated_chip(cfg);
  const auto placement =
      devices::place_on_device(chip, cfg.simulation.num_chips, mesh_dims(a.dims), cfg.simulation.topology);
  const SimulationResult x = replay_step(cfg, a, chip, placement);
  const SimulationResult y = replay_step(cfg, b, chip, placement);
  EXPECT_EQ(x.report.step_time_s, y.report.step_time_s) << what;
  EXPECT_EQ(x.report.exposed_comm_s, y.report.exposed_comm_s) << what;
  EXPECT_EQ(x.memory.total_gib(), y.memory.total_gib()) << what;
  EXPECT_EQ(x.tokens_per_s_per_chip, y.tokens_per_s_per_chip) << what;
  EXPECT_EQ(x.global_batch, y.global_batch) << what;
}

// l's dp_replicate 1 probe derived from its dp_replicate 2 probe is the one recorded, and
// both resized to dp_shard 2, 8 and 64 replay alike. The derivation throws if it refuses.
void expect_derived_is_recorded(const Layout& l) {
  const JobConfig one = at(l, 4);
  ASSERT_TRUE(replica_derivable(one)) << l.label;
  const ProbeRecording recorded = record_probe(one);
  const ProbeRecording replicated = record_probe(with_two_replicas(one), recorded.degree);
  ASSERT_EQ(replicated.degree, recorded.degree) << l.label;
  const ProbeRecording derived = probe_without_replicas(replicated, one);
  expect_same_step(recorded.step, derived.step, l.label + " (probe)");
  expect_same_storages(recorded.step, derived.step, l.label + " (probe)");
  expect_same_calls(recorded, derived, l.label);
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
    expect_same_replay(cfg, from_recorded, from_derived, what);
  }
}

// Each shape under separate and fused collectives.
std::vector<Layout> in_both_modes(const std::vector<Layout>& shapes) {
  std::vector<Layout> layouts;
  for (const std::string mode : {"separate", "fused"})
    for (Layout l : shapes) {
      l.label = mode + ", " + l.label;
      l.mode = mode;
      layouts.push_back(std::move(l));
    }
  return layouts;
}

// A narrow Qwen3-MoE in the style of Qwen3-30B-A3B: every block's MLP 8 routed experts of
// ffn 128, top 2 (tiny_config's other dimensions), with `more` after.
std::vector<std::string> moe(std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"--model.moe_experts", "8", "--model.moe_top_k", "2", "--model.moe_ffn_dim", "128"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
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
  for (const Layout& l : in_both_modes(shapes)) expect_derived_is_recorded(l);
}

// Without expert parallelism a MoE block's experts are parameters of its FSDP unit like the
// rest: one unit reduces at a time, and the fused step's waits have the dense shape.
TEST(ReplicaDerivation, MoeProbesAreDerived) {
  const std::vector<Layout> shapes = {
      {"moe fsdp, selective AC", moe(), 1},
      {"moe fsdp, full AC", moe({"--activation_checkpoint.mode", "full"}), 1},
      {"moe fsdp, 0.5 MiB buckets", moe({"--comm.bucket_cap_mb", "0.5"}), 1},
      {"moe tp 2 x fsdp", moe({"--parallelism.tensor_parallel_degree", "2"}), 2},
  };
  // The experts are there: their products recorded as grouped GEMMs.
  EXPECT_GT(record_step(tiny_config(moe()), false).op_counts.count(kGroupedMatmulScope), 0u);
  for (const Layout& l : in_both_modes(shapes)) expect_derived_is_recorded(l);
}

// With expert parallelism ep > 1 no probe degree records the layout: ep must divide the
// degree, a probe degree is an odd prime (so none at even ep, and ep itself at an odd prime),
// and there the router's E x dim weight (E a multiple of ep) is a multiple of the degree, its
// padded full buffer the parameter's size, and the degree is refused. The study records such
// layouts whole; there is no dp_replicate 2 probe to derive from, at either replica degree.
TEST(ReplicaDerivation, ExpertParallelLayoutsHaveNoProbe) {
  for (const std::string mode : {"separate", "fused"})
    for (const auto& [ep, experts] : std::vector<std::pair<int, int>>{{2, 8}, {3, 6}}) {
      const Layout l{mode + ", ep " + std::to_string(ep),
                     {"--model.moe_experts", std::to_string(experts), "--model.moe_top_k", "2", "--model.moe_ffn_dim",
                      "128", "--parallelism.expert_parallel_degree", std::to_string(ep)},
                     1, mode};
      const JobConfig one = at(l, 2 * ep);
      ASSERT_TRUE(replica_derivable(one)) << l.label;
      for (const JobConfig& cfg : {one, with_two_replicas(one)}) {
        try {
          record_probe(cfg);
          ADD_FAILURE() << l.label << ": probed at dp_replicate " << cfg.parallelism.data_parallel_replicate_degree;
        } catch (const Error& e) {
          // The degrees ep divides refused (the router), the next one is not a layout.
          EXPECT_NE(std::string(e.what()).find("expert_parallel_degree (" + std::to_string(ep) + ") must divide"),
                    std::string::npos)
              << l.label << ": " << e.what();
        }
      }
      std::string why;
      if (ep % 2 == 1)  // the router (experts x dim) at degree ep
        EXPECT_FALSE(distinguishable(experts * one.model.dim, ep, &why)) << l.label;
    }
}

// Were expert-parallel steps probed, the derivation would meet FSDP's expert units (one per
// block over efsdp, reducing beside the block's unit: under fused collectives two units in
// flight). On steps recorded with FSDP's notes at dp_shard 4 (record_noted): at ep 2 the
// derived step is the recorded one in both modes; at ep 4 the expert units shard over one rank
// and their reduce-scatters issue nothing, so under fused collectives their replica all-reduce
// has no reduce-scatter wait before it and the derivation refuses (separate: only removed,
// exact).
TEST(ReplicaDerivation, ExpertUnitsBesideBlockUnits) {
  for (const std::string mode : {"separate", "fused"})
    for (int ep : {2, 4}) {
      const Layout l{mode + ", ep " + std::to_string(ep),
                     moe({"--parallelism.expert_parallel_degree", std::to_string(ep)}), 1, mode};
      const JobConfig one = at(l, 4);
      const ProbeRecording recorded = record_noted(one);
      const ProbeRecording replicated = record_noted(with_two_replicas(one));
      // FSDP's calls on the expert units' group; the collectives the trace holds on it (none
      // on a group of one).
      const std::string efsdp = "efsdp" + std::to_string(4 / ep);
      int64_t expert_calls = 0, expert_issues = 0;
      for (const ShardCall& c : probe_notes(replicated).ranks.at(0).calls) expert_calls += c.group == efsdp ? 1 : 0;
      for (const devices::TraceEvent& e : replicated.step.trace.events())
        expert_issues += e.type == devices::TraceEvent::Type::kIssue && e.collective.group == efsdp ? 1 : 0;
      EXPECT_GT(expert_calls, 0) << l.label;
      EXPECT_EQ(expert_issues > 0, ep == 2) << l.label << ": " << expert_issues << " issues on " << efsdp;
      if (ep == 4 && mode == "fused") {
        try {
          probe_without_replicas(replicated, one);
          ADD_FAILURE() << l.label << ": derived";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("no reduce-scatter wait before a replica all-reduce"), std::string::npos)
              << l.label << ": " << e.what();
        }
        continue;
      }
      const ProbeRecording derived = probe_without_replicas(replicated, one);
      expect_same_step(recorded.step, derived.step, l.label);
      expect_same_storages(recorded.step, derived.step, l.label);
      expect_same_calls(recorded, derived, l.label);
      expect_same_replay(one, recorded.step, derived.step, l.label);
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
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study

