// The composite attention's stand-in on the meta device (trainer/model/kernels/meta_kernel.h):
// a recording that costs the attention scope as one flash kernel records the very same step
// whether the scope runs the composite's ops or the stand-in's one node, with grouped-query
// heads, under no, op-level and full activation checkpointing.
#include <gtest/gtest.h>

#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <string>

#include "parallel/activation_checkpoint.h"
#include "tests/study/same_step.h"
#include "tests/trainer/tiny_model_args.h"
#include "trainer/model/kernels/meta_kernel.h"
#include "trainer/model/model.h"
#include "trainer/simulate/trace_recorder.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

enum class Ac { kNone, kOp, kFull };

struct Recorded {
  devices::Trace trace;
  std::map<std::string, int64_t> ops;
  int64_t masked_fills = 0;  // composite attention ops run on this thread, recorded or not
};

Recorded record(Ac ac, bool stand_in) {
  const ModelArgs a = tiny_model_args();
  Transformer m(a, 16, torch::TensorOptions().device(torch::kMeta));
  if (ac == Ac::kOp) m->block_wrappers.push_back(op_activation_checkpoint_wrapper());
  if (ac == Ac::kFull) m->block_wrappers.push_back(activation_checkpoint_wrapper(1));
  auto tokens = torch::zeros({2, 16}, torch::TensorOptions().device(torch::kMeta).dtype(torch::kLong));
  static thread_local int64_t masked_fills = 0;
  masked_fills = 0;
  const at::CallbackHandle counter = at::addThreadLocalCallback(at::RecordFunctionCallback(
      [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        if (std::string(fn.name()) == "aten::masked_fill") ++masked_fills;
        return nullptr;
      }));
  Recorded r;
  {
    TraceRecorder rec(RecordOptions(true, false));
    if (!stand_in) set_meta_records_attention_kernel(false);  // the composite's ops, as before the stand-in
    cross_entropy_sum(m(tokens), tokens, tokens.numel(), false).backward();
    r.trace = rec.take_trace();
    r.ops = rec.op_counts();
  }
  at::removeCallback(counter);
  r.masked_fills = masked_fills;
  return r;
}

TEST(AttentionStandIn, RecordsTheCompositesStep) {
  ASSERT_LT(tiny_model_args().n_kv_heads, tiny_model_args().n_heads);  // grouped-query k and v
  for (Ac ac : {Ac::kNone, Ac::kOp, Ac::kFull}) {
    const std::string what = ac == Ac::kNone ? "no AC" : ac == Ac::kOp ? "op-level AC" : "full AC";
    const Recorded composite = record(ac, false), stand_in = record(ac, true);
    // The two paths differ inside the scope: the composite masks its scores there, twice per
    // block and more where the block is recomputed; the stand-in runs none of its ops.
    EXPECT_GE(composite.masked_fills, 2 * tiny_model_args().n_layers) << what;
    EXPECT_EQ(stand_in.masked_fills, 0) << what;
    // ... and nothing the recording holds tells them apart.
    study::testing::expect_same_trace(composite.trace, stand_in.trace, what);
    EXPECT_EQ(composite.ops, stand_in.ops) << what;
    const auto &s = composite.trace.storages(), &t = stand_in.trace.storages();
    ASSERT_EQ(s.size(), t.size()) << what;
    for (size_t i = 0; i < s.size(); ++i)
      EXPECT_TRUE(s[i].bytes == t[i].bytes && s[i].outlives_step == t[i].outlives_step) << what << " storage " << i + 1;
    EXPECT_EQ(composite.ops.at(kAttentionScope), ac == Ac::kFull ? 2 * tiny_model_args().n_layers
                                                                  : tiny_model_args().n_layers)
        << what;
  }
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
