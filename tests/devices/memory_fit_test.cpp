// A layout that does not fit in HBM is refused, naming its largest consumers.
#include <gtest/gtest.h>

#include "common/error.h"
#include "devices/memory_model.h"
#include "tests/devices/transformer_trace.h"

namespace titan::devices {
namespace {

TEST(MemoryFit, LayoutThatDoesNotFitIsRefusedNamingTheLargestConsumers) {
  // Qwen3-8B on 8 TPU v5e (16 GB each), no activation checkpointing, 8192 tokens per chip.
  TransformerLayout l;
  l.fsdp = 8;
  l.tokens = 8192;
  MemoryReport r = memory_per_chip(transformer_memory_inputs(testing::qwen3_8b_dims(), l),
                                   find_chip("tpu-v5e"));
  ASSERT_FALSE(r.fits);
  auto parts = r.consumers();
  EXPECT_EQ(parts[0].first, "activations");
  for (size_t i = 1; i < parts.size(); ++i) EXPECT_GE(parts[i - 1].second, parts[i].second);
  try {
    require_fits(r, "8 x tpu-v5e, dp_shard 8");
    FAIL() << "expected the layout to be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    const std::string m = e.what();
    EXPECT_NE(m.find("does not fit in memory (8 x tpu-v5e, dp_shard 8)"), std::string::npos) << m;
    EXPECT_NE(m.find("largest: activations"), std::string::npos) << m;
    EXPECT_NE(m.find("--simulation.allow_oom"), std::string::npos) << m;
  }
  // The same model with full checkpointing, 2048 tokens per chip over 64 chips fits.
  l.fsdp = 64;
  l.tokens = 2048;
  l.ac = ActivationCheckpoint::kFull;
  MemoryReport ok = memory_per_chip(transformer_memory_inputs(testing::qwen3_8b_dims(), l),
                                    find_chip("tpu-v5e"));
  EXPECT_TRUE(ok.fits) << ok.describe();
  EXPECT_NO_THROW(require_fits(ok, "64 x tpu-v5e"));
}

}  // namespace
}  // namespace titan::devices
