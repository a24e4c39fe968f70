// study::key_value reads a key of a configuration through the shared key table (the same
// member of the config at its offset): every key reads as it does through a registry built on
// the config itself, for values of every kind that differ from the defaults, and an unknown
// key is an error naming it.
#include <gtest/gtest.h>

#include <sstream>

#include "study/evaluate.h"
#include "tests/error_of.h"
#include "trainer/config/config_keys.h"
#include "trainer/config/config_loader.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

// The value as text from a registry made on cfg itself (what key_value built per call before).
std::string through_own_registry(const JobConfig& cfg, const std::string& key) {
  JobConfig copy = cfg;
  const Registry reg = make_registry(copy);
  for (const auto& s : reg.keys) {
    if (s.full() != key) continue;
    std::ostringstream os;
    os.precision(12);
    std::visit(
        [&](const auto& f) {
          using F = std::decay_t<decltype(f)>;
          if constexpr (std::is_same_v<F, EnumField>) os << f.names[f.get()];
          else if constexpr (std::is_same_v<F, bool*>) os << (*f ? "true" : "false");
          else if constexpr (std::is_same_v<F, std::vector<std::string>*>) {
            for (size_t i = 0; i < f->size(); ++i) os << (i ? " " : "") << (*f)[i];
          } else os << *f;
        },
        s.field);
    return os.str();
  }
  return "<no such key>";
}

TEST(KeyValue, EveryKeyReadsAsThroughTheConfigsOwnRegistry) {
  JobConfig cfg;
  // Keys of every kind away from their defaults: integers, a real, a string, a flag, enums
  // and a list.
  apply_override(cfg, "training.local_batch_size", "3");
  apply_override(cfg, "optimizer.lr", "0.000123456789012");
  apply_override(cfg, "model.flavor", "8B");
  apply_override(cfg, "comm.collective_mode", "separate");
  apply_override(cfg, "activation_checkpoint.mode", "full");
  apply_override(cfg, "simulation.num_chips", "4096");
  apply_override(cfg, "training.fused_kernels", "false");
  cfg.checkpoint.exclude_from_loading = {"optimizer", "lr_scheduler"};
  const JobConfig defaults;
  int differ = 0;
  for (const KeySpec& s : KeyTable::get().keys()) {
    const std::string key = s.full();
    EXPECT_EQ(key_value(cfg, key), through_own_registry(cfg, key)) << key;
    differ += key_value(cfg, key) != key_value(defaults, key);
  }
  EXPECT_EQ(key_value(cfg, "comm.collective_mode"), "separate");
  EXPECT_EQ(key_value(cfg, "optimizer.lr"), "0.000123456789012");
  EXPECT_EQ(key_value(cfg, "simulation.num_chips"), "4096");
  EXPECT_EQ(key_value(cfg, "checkpoint.exclude_from_loading"), "optimizer lr_scheduler");
  EXPECT_EQ(key_value(cfg, "training.fused_kernels"), "false");
  EXPECT_GE(differ, 8);  // the overrides above, read from cfg and not from the table's own config
}

TEST(KeyValue, UnknownKeyIsAnErrorNamingIt) {
  const std::string e = error_of([] { key_value(JobConfig{}, "training.no_such_key"); }, ErrorKind::kConfig);
  EXPECT_NE(e.find("training.no_such_key"), std::string::npos) << e;
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
