// Named-tensor remat policies (common/remat_policy.h, parallel/activation_checkpoint.h): each
// policy's saved and recomputed set on a tiny model (the products the recompute reruns, the
// gradients of no checkpointing), host offload in the recording (copies on their own streams,
// offloaded tensors out of the memory walk), and the refusal naming a policy that would fit.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>

#include "common/remat_policy.h"
#include "devices/trace_memory.h"
#include "parallel/activation_checkpoint.h"
#include "tests/error_of.h"
#include "tests/trainer/mm_counter.h"
#include "trainer/config/config_loader.h"
#include "trainer/model/model.h"
#include "trainer/simulate/remat_advice.h"
#include "trainer/simulate/simulate.h"
#include "trainer/simulate/trace_recorder.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

using T = RematTensor;
using A = RematAction;

TEST(RematPolicy, NamedPoliciesSaveWhatMaxTextSaves) {
  const RematPolicy minimal = remat_policy("minimal");
  for (T t : {T::kQueryProj, T::kKeyProj, T::kValueProj, T::kOutProj, T::kMlpWi0, T::kMlpWi1, T::kMlpWo})
    EXPECT_EQ(minimal.of(t), A::kDevice) << remat_tensor_name(t);
  EXPECT_EQ(minimal.of(T::kContext), A::kRemat);  // the attention kernel is a dot with batch dims
  EXPECT_EQ(remat_policy("save_qkv_proj").of(T::kOutProj), A::kRemat);
  EXPECT_EQ(remat_policy("save_qkv_proj").of(T::kKeyProj), A::kDevice);
  EXPECT_EQ(remat_policy("save_dot_except_mlp").of(T::kOutProj), A::kDevice);
  EXPECT_EQ(remat_policy("save_dot_except_mlp").of(T::kMlpWo), A::kRemat);
  EXPECT_EQ(remat_policy("save_dot_except_mlpwi").of(T::kMlpWo), A::kDevice);
  EXPECT_EQ(remat_policy("save_dot_except_mlpwi").of(T::kMlpWi0), A::kRemat);
  EXPECT_EQ(remat_policy("save_dot_with_context_except_mlp").of(T::kContext), A::kDevice);
  EXPECT_EQ(remat_policy("qkv_proj_offloaded").of(T::kValueProj), A::kOffload);
  EXPECT_EQ(remat_policy("minimal_offloaded").of(T::kMlpWi1), A::kOffload);
  const RematPolicy full = remat_policy("full");
  for (int i = 0; i < kRematTensors; ++i)
    EXPECT_EQ(full.of(T(i)), T(i) == T::kDecoderLayerInput ? A::kDevice : A::kRemat) << remat_tensor_name(T(i));
}

TEST(RematPolicy, CustomListsNameTensorsAndRefuseMistakes) {
  const RematPolicy p = remat_policy("custom", "context, qkv_proj", "decoder_layer_input,mlpwo");
  EXPECT_EQ(p.of(T::kContext), A::kDevice);
  EXPECT_EQ(p.of(T::kKeyProj), A::kDevice);  // qkv_proj names q, k and v
  EXPECT_EQ(p.of(T::kDecoderLayerInput), A::kOffload);
  EXPECT_EQ(p.of(T::kMlpWo), A::kOffload);
  EXPECT_EQ(p.of(T::kOutProj), A::kRemat);
  EXPECT_TRUE(p.offloads());
  // The block input stays on device when not offloaded: the recompute needs it.
  EXPECT_EQ(remat_policy("custom", "", "").of(T::kDecoderLayerInput), A::kDevice);
  EXPECT_NE(error_of([] { remat_policy("custom", "query", ""); }).find("unknown tensor name \"query\""), std::string::npos);
  EXPECT_NE(error_of([] { remat_policy("custom", "context", "context"); }).find("both"), std::string::npos);
  EXPECT_NE(error_of([] { remat_policy("minimal", "context", ""); }).find("only to policy = \"custom\""), std::string::npos);
  EXPECT_NE(error_of([] { remat_policy("nothing"); }).find("activation_checkpoint.policy"), std::string::npos);
  // Through the config: the key names itself.
  const std::string cfg = std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml";
  EXPECT_NE(error_of([&] {
              load_job_config({"--config", cfg, "--activation_checkpoint.mode", "policy", "--activation_checkpoint.policy",
                               "custom", "--activation_checkpoint.offload_to_host", "mlp"});
            }).find("activation_checkpoint.offload_to_host"),
            std::string::npos);
}

TEST(RematPolicy, LinearProductsMapToTheirNames) {
  EXPECT_EQ(linear_remat_tensor(0, 4, 3), T::kQueryProj);
  EXPECT_EQ(linear_remat_tensor(3, 4, 3), T::kOutProj);
  EXPECT_EQ(linear_remat_tensor(4, 4, 3), T::kMlpWi0);
  EXPECT_EQ(linear_remat_tensor(5, 4, 3), T::kMlpWi1);
  EXPECT_EQ(linear_remat_tensor(6, 4, 3), T::kMlpWo);
  EXPECT_EQ(linear_remat_tensor(5, 4, 2), T::kMlpWo);  // a non-gated MLP: one input product
}

ModelArgs tiny_args() {
  ModelArgs a = model_flavor("llama3", "debugmodel");
  a.dim = 32, a.n_layers = 3, a.n_heads = 4, a.n_kv_heads = 2, a.head_dim = 8, a.ffn_dim = 48;
  a.vocab_size = 50;
  return a;
}

struct Step {
  int64_t backward_mm = 0;
  std::vector<torch::Tensor> grads;
};

// One forward and backward in double on fixed weights and tokens; `policy` null: no AC.
Step real_step(const RematPolicy* policy) {
  const ModelArgs a = tiny_args();
  Transformer m(a, 16, torch::TensorOptions().dtype(torch::kFloat64));
  m->init_weights(3);
  m->set_fused_kernels(FusedKernels::all(false));
  if (policy) m->block_wrappers.push_back(policy_activation_checkpoint_wrapper(*policy, {4, 3}));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto tokens = torch::randint(a.vocab_size, {2, 16}, gen, torch::kLong);
  auto loss = cross_entropy_sum(m(tokens), tokens, tokens.numel(), false);
  Step s;
  {
    MmCounter c;
    loss.backward();
    s.backward_mm = MmCounter::count();
  }
  for (const auto& p : m->parameters()) s.grads.push_back(p.grad().clone());
  return s;
}

TEST(RematPolicy, RecomputeRerunsOnlyTheUnsavedProductsAndGradientsMatch) {
  const Step none = real_step(nullptr);
  const int64_t layers = tiny_args().n_layers;
  // Products the recompute reruns per block: those the policy neither saves nor offloads
  // (offloaded ones stay where they are on a host run and are reused like saved ones).
  const std::vector<std::pair<RematPolicy, int64_t>> cases = {
      {remat_policy("minimal"), 0},
      {remat_policy("save_dot_with_context_except_mlp"), 3},
      {remat_policy("save_dot_except_mlpwi"), 2},
      {remat_policy("save_dot_except_mlp"), 3},
      {remat_policy("save_qkv_proj"), 4},
      {remat_policy("qkv_proj_offloaded"), 4},
      {remat_policy("full"), 7},
      {remat_policy("custom", "context", "decoder_layer_input,out_proj,query_proj,key_proj,value_proj"), 3},
  };
  for (const auto& [p, rerun] : cases) {
    SCOPED_TRACE(p.name + ": " + p.describe());
    const Step s = real_step(&p);
    EXPECT_EQ(s.backward_mm - none.backward_mm, rerun * layers);
    ASSERT_EQ(s.grads.size(), none.grads.size());
    for (size_t i = 0; i < s.grads.size(); ++i)
      EXPECT_LT((s.grads[i] - none.grads[i]).abs().max().item<double>(),
                1e-12 * none.grads[i].abs().max().item<double>() + 1e-300);
  }
}

// The meta recording of the tiny model (4 blocks, bigger) under a policy, with its trace.
struct Recorded {
  int64_t d2h = 0, h2d = 0, d2h_bytes = 0;
  devices::TraceMemory memory;
};
Recorded record(const RematPolicy& p) {
  ModelArgs a = tiny_args();
  a.n_layers = 4, a.dim = 64, a.ffn_dim = 96;
  Transformer m(a, 64, torch::TensorOptions().device(torch::kMeta).dtype(torch::kBFloat16));
  m->block_wrappers.push_back(policy_activation_checkpoint_wrapper(p, {4, 3}));
  auto tokens = torch::zeros({4, 64}, torch::TensorOptions().device(torch::kMeta).dtype(torch::kLong));
  Recorded r;
  TraceRecorder rec(RecordOptions(true, false));
  cross_entropy_sum(m(tokens), tokens, tokens.numel(), false).backward();
  const devices::Trace& t = rec.finish();
  for (const auto& e : t.events())
    if (e.type == devices::TraceEvent::Type::kIssue && e.collective.kind == devices::CollectiveKind::kHostCopy) {
      (e.collective.group == "d2h" ? r.d2h : r.h2d)++;
      if (e.collective.group == "d2h") r.d2h_bytes += e.collective.bytes;
    }
  r.memory = devices::trace_memory(t).eager();
  return r;
}

TEST(RematPolicy, OffloadedTensorsLeaveDeviceMemoryAndCostHostCopies) {
  const Recorded device = record(remat_policy("custom", "decoder_layer_input,query_proj,key_proj,value_proj", ""));
  const Recorded offload = record(remat_policy("custom", "decoder_layer_input", "query_proj,key_proj,value_proj"));
  const Recorded full = record(remat_policy("full"));
  EXPECT_EQ(device.d2h + device.h2d, 0);
  // One copy each way per offloaded tensor of each block: q, k, v over 4 blocks.
  EXPECT_EQ(offload.d2h, 12);
  EXPECT_EQ(offload.h2d, 12);
  // q [4 x 64 x 32] and k, v [4 x 64 x 16] in bf16 per block.
  const int64_t per_block = 4 * 64 * (32 + 16 + 16) * 2;
  EXPECT_EQ(offload.d2h_bytes, 4 * per_block);
  // At the peak (the last block's backward) the device policy holds the other three blocks'
  // q, k, v; offloaded, only the block fetched ahead of its recompute is back (and the one
  // being recomputed), so at least two blocks' worth is out of HBM, at most all four.
  const int64_t saved = device.memory.peak_temporaries - offload.memory.peak_temporaries;
  EXPECT_GE(saved, 2 * per_block);
  EXPECT_LE(saved, 4 * per_block);
  // Offloading every saved tensor leaves the walk no higher than full recompute's.
  EXPECT_LE(offload.memory.peak_temporaries, device.memory.peak_temporaries);
  EXPECT_GE(offload.memory.peak_temporaries, full.memory.peak_temporaries);
}

JobConfig small_tpu(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_8b.toml",
                                   "--job.dump_folder", "/tmp/titan_remat_policy_test",
                                   "--model.name", "llama3", "--model.n_layers", "32", "--model.dim", "256",
                                   "--model.ffn_dim", "768", "--model.n_heads", "4", "--model.n_kv_heads", "2",
                                   "--model.head_dim", "64", "--model.vocab_size", "4096", "--training.seq_len",
                                   "8192", "--simulation.num_chips", "8", "--simulation.device", "tpu-v5e",
                                   "--simulation.execution", "compiled", "--training.local_batch_size", "12"};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

TEST(RematPolicy, RefusalNamesAPolicyThatFits) {
  // Saving every product does not fit on a 16 GiB chip; the refusal names the policy with the
  // least recompute that its estimate fits, and that policy's own walk does fit.
  const std::vector<std::string> minimal = {"--activation_checkpoint.mode", "policy", "--activation_checkpoint.policy",
                                            "minimal"};
  const std::string why = error_of([&] { simulate(small_tpu(minimal), false); }, ErrorKind::kConfig);
  ASSERT_NE(why.find("does not fit"), std::string::npos) << why;
  EXPECT_NE(why.find("% over"), std::string::npos) << why;
  const std::string flag = "--activation_checkpoint.policy ";
  const auto at = why.find("estimated to fit with");
  ASSERT_NE(at, std::string::npos) << why;
  const auto name_at = why.find(flag, at) + flag.size();
  const std::string named = why.substr(name_at, why.find_first_of(" (", name_at) - name_at);
  EXPECT_NE(named, "minimal");
  std::vector<std::string> cheaper = {"--activation_checkpoint.mode", "policy", "--activation_checkpoint.policy", named};
  if (named == "custom") cheaper.insert(cheaper.end(), {"--activation_checkpoint.offload_to_host", "decoder_layer_input"});
  const SimulationResult r = simulate(small_tpu(cheaper), false);
  EXPECT_TRUE(r.memory.fits) << named << ": " << r.memory.describe();
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
