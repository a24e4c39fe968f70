// A vocabulary taken from the tokenizer is padded to what tensor parallelism needs (as
// Megatron's make_vocab_size_divisible_by); an explicit model.vocab_size is kept as given.
#include <gtest/gtest.h>

#include "common/error.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/resolve_model.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

TEST(VocabPadding, TokenizerVocabRoundsUpToTpTimesDivisor) {
  struct Case {
    std::vector<std::string> overrides;
    int64_t expected;
  };
  const std::vector<Case> cases = {
      {{}, 257},
      {{"parallelism.tensor_parallel_degree", "2"}, 258},
      {{"parallelism.tensor_parallel_degree", "4"}, 260},
      {{"parallelism.tensor_parallel_degree", "2", "model.vocab_size_divisible_by", "64"}, 384},
      {{"model.vocab_size_divisible_by", "128"}, 384},
      {{"parallelism.tensor_parallel_degree", "2", "model.vocab_size", "300"}, 300},  // explicit: as given
  };
  for (const auto& c : cases) {
    JobConfig cfg;
    apply_toml(cfg, "[model]\nflavor = \"debugmodel\"\n", "t.toml");
    for (size_t i = 0; i + 1 < c.overrides.size(); i += 2) apply_override(cfg, c.overrides[i], c.overrides[i + 1]);
    EXPECT_EQ(resolve_model_args(cfg, 257).vocab_size, c.expected) << c.overrides.size();
  }
}

TEST(VocabPadding, FlavorVocabIsNotPadded) {
  JobConfig cfg;
  apply_toml(cfg, "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[parallelism]\ntensor_parallel_degree = 8\n", "t.toml");
  EXPECT_EQ(resolve_model_args(cfg, 0).vocab_size, 128256);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
