// The composites' stand-ins on the meta device (trainer/model/kernels/meta_kernel.h): a
// recording that keeps a scope as one kernel (the attention as a flash kernel, the MoE experts'
// loop of products as one grouped GEMM) records the very same step whether the scope runs the
// composite's ops or the stand-in's one node.
#include <gtest/gtest.h>

#include <ATen/record_function.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "parallel/activation_checkpoint.h"
#include "tests/study/same_step.h"
#include "tests/trainer/tiny_model_args.h"
#include "trainer/model/grouped_matmul.h"
#include "trainer/model/kernels/meta_kernel.h"
#include "trainer/model/model.h"
#include "trainer/config/config_loader.h"
#include "trainer/simulate/recording_wire.h"
#include "trainer/simulate/simulate.h"
#include "trainer/simulate/trace_recorder.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

enum class Ac { kNone, kOp, kFull };

struct Recorded {
  devices::Trace trace;
  std::map<std::string, int64_t> ops;
  int64_t marker_calls = 0;  // calls of an op only the composite runs, on this thread, recorded or not
};

thread_local const char* marker = nullptr;
thread_local int64_t marker_calls = 0;

// One step of a model with args `a` on the meta device, recorded for an accelerator (flash
// attention, grouped GEMMs); composite(): turns a stand-in's switch off after the recorder
// set it, or does nothing.
Recorded record(const ModelArgs& a, Ac ac, const char* marker_op, const std::function<void()>& composite) {
  Transformer m(a, 16, torch::TensorOptions().device(torch::kMeta));
  if (ac == Ac::kOp) m->block_wrappers.push_back(op_activation_checkpoint_wrapper());
  if (ac == Ac::kFull) m->block_wrappers.push_back(activation_checkpoint_wrapper(1));
  auto tokens = torch::zeros({2, 16}, torch::TensorOptions().device(torch::kMeta).dtype(torch::kLong));
  marker = marker_op;
  marker_calls = 0;
  const at::CallbackHandle counter = at::addThreadLocalCallback(at::RecordFunctionCallback(
      [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        if (std::string(fn.name()) == marker) ++marker_calls;
        return nullptr;
      }));
  Recorded r;
  {
    TraceRecorder rec(RecordOptions(true, false));
    composite();
    cross_entropy_sum(m(tokens), tokens, tokens.numel(), false).backward();
    r.trace = rec.take_trace();
    r.ops = rec.op_counts();
  }
  at::removeCallback(counter);
  r.marker_calls = marker_calls;
  return r;
}

void expect_same(const Recorded& composite, const Recorded& stand_in, const std::string& what) {
  // The two paths differ inside the scope: the composite runs the marker op there, the
  // stand-in none of its ops ...
  EXPECT_GT(composite.marker_calls, 0) << what;
  EXPECT_EQ(stand_in.marker_calls, 0) << what;
  // ... and nothing the recording holds tells them apart.
  study::testing::expect_same_trace(composite.trace, stand_in.trace, what);
  EXPECT_EQ(composite.ops, stand_in.ops) << what;
  const auto &s = composite.trace.storages(), &t = stand_in.trace.storages();
  ASSERT_EQ(s.size(), t.size()) << what;
  for (size_t i = 0; i < s.size(); ++i)
    EXPECT_TRUE(s[i].bytes == t[i].bytes && s[i].outlives_step == t[i].outlives_step) << what << " storage " << i + 1;
}

std::string ac_name(Ac ac) { return ac == Ac::kNone ? "no AC" : ac == Ac::kOp ? "op-level AC" : "full AC"; }

// With grouped-query heads, under no, op-level and full activation checkpointing.
TEST(MetaStandIn, AttentionRecordsTheCompositesStep) {
  const ModelArgs a = tiny_model_args();
  ASSERT_LT(a.n_kv_heads, a.n_heads);
  for (Ac ac : {Ac::kNone, Ac::kOp, Ac::kFull}) {
    const Recorded composite = record(a, ac, "aten::masked_fill", [] { set_meta_records_attention_kernel(false); });
    const Recorded stand_in = record(a, ac, "aten::masked_fill", [] {});
    expect_same(composite, stand_in, "attention, " + ac_name(ac));
    EXPECT_EQ(composite.ops.at(kAttentionScope), ac == Ac::kFull ? 2 * a.n_layers : a.n_layers);
  }
}

// The MoE debug model's experts (three grouped products per layer: w1 and w3 read the same
// tokens, so their input gradients are summed), with no and full activation checkpointing.
TEST(MetaStandIn, GroupedMatmulRecordsTheLoopsStep) {
  ModelArgs a = model_flavor("qwen3", "debugmodel_moe");
  a.vocab_size = 64, a.n_layers = 2;
  ASSERT_TRUE(a.moe_grouped_mm);
  for (Ac ac : {Ac::kNone, Ac::kFull}) {
    const Recorded composite = record(a, ac, "aten::unbind", [] { set_meta_records_grouped_matmul_kernel(false); });
    const Recorded stand_in = record(a, ac, "aten::unbind", [] {});
    expect_same(composite, stand_in, "grouped matmul, " + ac_name(ac));
    EXPECT_GT(composite.ops.at(kGroupedMatmulScope), 0);
  }
}

// Context parallelism's ring-attention blocks (forward and backward, both rotate methods,
// cp 2 and 4 over grouped-query heads): the whole recorded step, as it goes on the wire, is
// the same bytes with the blocks' stand-ins as with their ops (TITAN_META_STAND_INS=0).
TEST(MetaStandIn, RingAttentionBlocksRecordTheSameStep) {
  for (const char* cp : {"2", "4"})
    for (const char* rotate : {"allgather", "alltoall"}) {
      const JobConfig cfg = load_job_config(
          {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_8b.toml", "--job.dump_folder",
           "/tmp/titan_meta_stand_in_test", "--model.n_layers", "2", "--model.dim", "256", "--model.ffn_dim", "512",
           "--model.n_heads", "8", "--model.n_kv_heads", "4", "--model.head_dim", "32", "--model.vocab_size", "1024",
           "--training.seq_len", "512", "--simulation.num_chips", "16", "--simulation.device", "tpu-v5p",
           "--simulation.layer_extrapolation", "false", "--parallelism.context_parallel_degree", cp,
           "--parallelism.context_parallel_rotate_method", rotate});
      const std::string what = std::string("cp ") + cp + ", " + rotate;
      auto bytes = [&](bool stand_ins) {
        if (!stand_ins) setenv("TITAN_META_STAND_INS", "0", 1);
        marker = "aten::amax";  // the block's log-sum-exp, only where its ops run
        marker_calls = 0;
        const at::CallbackHandle counter = at::addThreadLocalCallback(at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              if (std::string(fn.name()) == marker) ++marker_calls;
              return nullptr;
            }));
        const std::string b = encode_step(record_step(cfg));
        at::removeCallback(counter);
        unsetenv("TITAN_META_STAND_INS");
        return std::make_pair(b, marker_calls);
      };
      const auto [composite, composite_blocks] = bytes(false);
      const auto [stand_in, stand_in_blocks] = bytes(true);
      EXPECT_GT(composite_blocks, 0) << what;
      EXPECT_EQ(stand_in_blocks, 0) << what;
      EXPECT_TRUE(composite == stand_in) << what << ": " << composite.size() << " vs " << stand_in.size() << " bytes";
    }
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
