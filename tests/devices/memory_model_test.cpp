// Memory model against hand-computed parameter, gradient, optimizer and activation bytes.
#include "devices/memory_model.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/devices/transformer_trace.h"

namespace titan::devices {
namespace {

ModelArgs qwen3_8b() { return testing::qwen3_8b_dims(); }

TEST(MemoryModel, Qwen3ParameterCount) {
  ModelArgs d = qwen3_8b();
  // wq 4096x4096 + wk, wv 4096x1024 + wo 4096x4096 + 3 x 4096x12288 + 2 norms + q/k norms
  int64_t layer = 16777216 + 2 * 4194304 + 16777216 + 3 * 50331648 + 2 * 4096 + 2 * 128;
  EXPECT_EQ(d.layer_params(), layer);
  EXPECT_EQ(layer, 192946432);
  EXPECT_EQ(d.num_params(), 36 * layer + 2 * 151936LL * 4096 + 4096);
  EXPECT_EQ(d.num_params(), 8190735360);  // docs/models.md: 8.19B
}

TEST(MemoryModel, AdamWBytesPerParameter) {
  ChipSpec v7 = find_chip("tpu-v7");
  MemoryInputs in;
  in.local_params = 1000000000;
  // fp32 params: 4 (param) + 4 (grad) + 8 (exp_avg, exp_avg_sq) = 16 bytes each.
  MemoryReport fp32 = memory_per_chip(in, v7);
  EXPECT_EQ(fp32.params, 4000000000);
  EXPECT_EQ(fp32.grads, 4000000000);
  EXPECT_EQ(fp32.optimizer, 8000000000);
  EXPECT_EQ(fp32.master, 0);
  EXPECT_EQ(fp32.total, 16000000000 + (int64_t{1} << 30));
  // bf16 params: 2 + 2 + 8 + 4 (fp32 master) = 16 bytes as well.
  in.param_bytes = 2;
  in.grad_bytes = 2;
  in.master_weights = true;
  MemoryReport bf16 = memory_per_chip(in, v7);
  EXPECT_EQ(bf16.params, 2000000000);
  EXPECT_EQ(bf16.master, 4000000000);
  EXPECT_EQ(bf16.total, fp32.total);
  EXPECT_EQ(bf16.capacity, int64_t{192} << 30);
  EXPECT_TRUE(bf16.fits);
}

TEST(MemoryModel, ActivationsPerCheckpointMode) {
  ModelArgs d = qwen3_8b();
  const int64_t tokens = 8192;
  LayerActivations a = transformer_activations(d, tokens, 1);
  // No TP: 2D (norm inputs) + 2D (gathered norm outputs) + (Hq+Hkv) pre-QK-norm +
  // (Hq+2Hkv) flash inputs + Hq attention out + 4F MLP = 80896 elements, bf16, + fp32 LSE.
  int64_t per_token = (2 * 4096 + 2 * 4096 + 5120 + 6144 + 4096 + 4 * 12288) * 2 + 32 * 4;
  EXPECT_EQ(per_token, 161920);
  EXPECT_EQ(a.full, tokens * per_token);
  EXPECT_EQ(a.input, tokens * 4096 * 2);
  EXPECT_LT(a.selective, a.full);
  EXPECT_GT(a.selective, a.input);

  MemoryInputs in;
  in.layer_activation_bytes = a.full;
  in.layer_selective_bytes = a.selective;
  in.layer_input_bytes = a.input;
  in.local_layers = 36;
  ChipSpec v7 = find_chip("tpu-v7");
  MemoryReport none = memory_per_chip(in, v7);
  EXPECT_EQ(none.activations, 36 * a.full);
  in.ac = ActivationCheckpoint::kFull;
  EXPECT_EQ(memory_per_chip(in, v7).activations, 36 * a.input + a.full);
  in.ac = ActivationCheckpoint::kSelective;
  EXPECT_EQ(memory_per_chip(in, v7).activations, 36 * a.selective + (a.full - a.selective));
  in.selective_every = 2;  // every 2nd layer fully checkpointed
  EXPECT_EQ(memory_per_chip(in, v7).activations, 18 * a.full + 18 * a.input + a.full);
  in.microbatches_in_flight = 4;
  EXPECT_EQ(memory_per_chip(in, v7).activations, 4 * (18 * a.full + 18 * a.input) + a.full);

  // TP shards everything but the gathered norm outputs.
  LayerActivations t4 = transformer_activations(d, tokens, 4);
  EXPECT_EQ(t4.input, tokens * 1024 * 2);
  EXPECT_EQ(t4.full, tokens * ((1024 + 4096 + 1280 + 1536 + 1024 + 1024 + 4096 + 4 * 3072) * 2 + 8 * 4));
}

TEST(MemoryModel, FsdpLayoutOnTpuV7) {
  ModelArgs d = qwen3_8b();
  TransformerLayout l;
  l.fsdp = 8192;
  l.tokens = 8192;
  l.ac = ActivationCheckpoint::kFull;
  MemoryInputs in = transformer_memory_inputs(d, l);
  EXPECT_EQ(in.local_params, (8190735360 + 8191) / 8192);  // 999,847 per chip
  EXPECT_EQ(in.local_layers, 36);
  // FSDP buffers: the output projection (622M params) gathered in bf16, the next block
  // prefetched, the projection's fp32 gradient before its reduce-scatter.
  const int64_t unit = 151936LL * 4096, layer = 192946432;
  EXPECT_EQ(in.collective_buffer_bytes, (unit + layer) * 2 + unit * 4);
  EXPECT_EQ(in.extra_activation_bytes, 8192LL * ((4096 + 4096) * 2 + 151936LL * 10));
  MemoryReport r = memory_per_chip(in, find_chip("tpu-v7"));
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.params, in.local_params * 4);
  // The same model unsharded does not fit a 16 GB v5e: reported, not an error.
  TransformerLayout one;
  one.tokens = 8192;
  MemoryReport v5e = memory_per_chip(transformer_memory_inputs(d, one), find_chip("tpu-v5e"));
  EXPECT_FALSE(v5e.fits);
  EXPECT_GT(v5e.total, 16 * 8190735360LL);
  EXPECT_NE(v5e.describe().find("DOES NOT FIT"), std::string::npos);
}

TEST(MemoryModel, ParseMode) {
  EXPECT_EQ(parse_activation_checkpoint("selective"), ActivationCheckpoint::kSelective);
  EXPECT_THROW(parse_activation_checkpoint("some"), Error);
}

}  // namespace
}  // namespace titan::devices
