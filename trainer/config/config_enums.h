// The config's choices as enums, and the one table of the names users write for them
// (TOML values, --section.key VALUE, --help, saved configs). Used by job_config.h and the
// code that maps a choice onto a lower layer's options.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "common/collective_mode.h"
#include "common/model_args.h"

namespace titan {

enum class ModelFamily { kQwen3, kLlama3 };
enum class FlavorBool { kFlavor, kTrue, kFalse };  // a flavor's value, or forced on/off
enum class OptimizerName { kAdamW };
enum class DecayType { kLinear, kSqrt, kCosine };
enum class DatasetKind { kCorpus, kText };
enum class Dtype { kFloat32, kBFloat16, kFloat16 };
enum class ReshardPolicy { kDefault, kAlways, kNever };
enum class PipelineSchedule { kGPipe, k1F1B, kInterleaved1F1B, kInterleavedZeroBubble, kZBVZeroBubble };
enum class AsyncMode { kDisabled, kAsync };
enum class AcMode { kNone, kSelective, kFull, kPolicy };
enum class CommBackend { kMpi, kGloo };
enum class Execution { kEager, kDeferAndFuse, kCompiled };

// EnumNames<E>::value[i] is the name of the enumerator with value i.
template <typename E>
struct EnumNames;
#define TITAN_ENUM_NAMES(E, ...)                                          \
  template <>                                                            \
  struct EnumNames<E> {                                                  \
    static constexpr std::array value = {__VA_ARGS__};                   \
  }
TITAN_ENUM_NAMES(ModelFamily, "qwen3", "llama3");
TITAN_ENUM_NAMES(MlpActivation, "swiglu", "gelu", "relu");  // common/model_args.h
TITAN_ENUM_NAMES(FlavorBool, "flavor", "true", "false");
TITAN_ENUM_NAMES(OptimizerName, "AdamW");
TITAN_ENUM_NAMES(DecayType, "linear", "sqrt", "cosine");
TITAN_ENUM_NAMES(DatasetKind, "corpus", "text");
TITAN_ENUM_NAMES(Dtype, "float32", "bfloat16", "float16");
TITAN_ENUM_NAMES(ReshardPolicy, "default", "always", "never");
TITAN_ENUM_NAMES(PipelineSchedule, "GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble");
TITAN_ENUM_NAMES(AsyncMode, "disabled", "async");
TITAN_ENUM_NAMES(AcMode, "none", "selective", "full", "policy");
TITAN_ENUM_NAMES(CommBackend, "mpi", "gloo");
TITAN_ENUM_NAMES(CollectiveMode, "fused", "separate");
TITAN_ENUM_NAMES(Execution, "eager", "defer_and_fuse", "compiled");
#undef TITAN_ENUM_NAMES

template <typename E>
std::string to_string(E e) {
  return EnumNames<E>::value[static_cast<size_t>(e)];
}

template <typename E>
std::vector<std::string> enum_names() {
  const auto& v = EnumNames<E>::value;
  return std::vector<std::string>(v.begin(), v.end());
}

}  // namespace titan
