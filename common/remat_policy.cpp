#include "common/remat_policy.h"

#include <sstream>

#include "common/error.h"

namespace titan {
namespace {

using T = RematTensor;

// One name of the config lists -> the tensors it covers.
std::vector<T> tensors_named(const std::string& n) {
  if (n == "decoder_layer_input") return {T::kDecoderLayerInput};
  if (n == "query_proj") return {T::kQueryProj};
  if (n == "key_proj") return {T::kKeyProj};
  if (n == "value_proj") return {T::kValueProj};
  if (n == "qkv_proj") return {T::kQueryProj, T::kKeyProj, T::kValueProj};
  if (n == "context") return {T::kContext};
  if (n == "out_proj") return {T::kOutProj};
  if (n == "mlpwi") return {T::kMlpWi0, T::kMlpWi1};
  if (n == "mlpwi_0") return {T::kMlpWi0};
  if (n == "mlpwi_1") return {T::kMlpWi1};
  if (n == "mlpwo") return {T::kMlpWo};
  return {};
}

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    const auto b = cur.find_first_not_of(" \t"), e = cur.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(cur.substr(b, e - b + 1));
    cur.clear();
  };
  for (char c : list) {
    if (c == ',') flush();
    else cur += c;
  }
  flush();
  return out;
}

// MaxText's dots without batch dimensions (checkpoint_dots_with_no_batch_dims): every linear
// product of the block; the attention core is a kernel with batch dimensions.
const std::vector<T> kDots = {T::kQueryProj, T::kKeyProj, T::kValueProj, T::kOutProj, T::kMlpWi0, T::kMlpWi1, T::kMlpWo};
const std::vector<T> kQkv = {T::kQueryProj, T::kKeyProj, T::kValueProj};

}  // namespace

const char* remat_tensor_name(RematTensor t) {
  switch (t) {
    case T::kDecoderLayerInput: return "decoder_layer_input";
    case T::kQueryProj: return "query_proj";
    case T::kKeyProj: return "key_proj";
    case T::kValueProj: return "value_proj";
    case T::kContext: return "context";
    case T::kOutProj: return "out_proj";
    case T::kMlpWi0: return "mlpwi_0";
    case T::kMlpWi1: return "mlpwi_1";
    case T::kMlpWo: return "mlpwo";
    case T::kCount: break;
  }
  return "?";
}

bool RematPolicy::offloads() const {
  for (RematAction a : action)
    if (a == RematAction::kOffload) return true;
  return false;
}

std::string RematPolicy::describe() const {
  std::ostringstream os;
  const std::pair<RematAction, const char*> groups[] = {
      {RematAction::kDevice, "device"}, {RematAction::kOffload, "offload"}, {RematAction::kRemat, "recomputed"}};
  bool first_group = true;
  for (auto [a, label] : groups) {
    std::string names;
    for (int i = 0; i < kRematTensors; ++i)
      if (action[static_cast<size_t>(i)] == a) names += (names.empty() ? "" : ", ") + std::string(remat_tensor_name(T(i)));
    if (names.empty()) continue;
    os << (first_group ? "" : "; ") << label << ": " << names;
    first_group = false;
  }
  return os.str();
}

const std::vector<std::string>& named_remat_policies() {
  static const std::vector<std::string> kNames = {
      "minimal", "save_dot_with_context_except_mlp", "save_dot_except_mlpwi", "save_dot_except_mlp",
      "save_qkv_proj", "minimal_offloaded", "qkv_proj_offloaded", "full"};
  return kNames;
}

RematPolicy remat_policy(const std::string& name, const std::string& save_on_device, const std::string& offload_to_host) {
  RematPolicy p;
  p.name = name;
  p.action.fill(RematAction::kRemat);
  auto set = [&](const std::vector<T>& ts, RematAction a) {
    for (T t : ts) p.action[static_cast<size_t>(t)] = a;
  };
  auto device = [&](std::vector<T> ts) { set(ts, RematAction::kDevice); };
  if (name != "custom") {
    TITAN_CONFIG_CHECK(save_on_device.empty() && offload_to_host.empty(), "activation_checkpoint.policy = \"", name,
                       "\": save_on_device and offload_to_host apply only to policy = \"custom\"");
    // The checkpointed block's input: kept by every named policy (MaxText's scan carry).
    device({T::kDecoderLayerInput});
    if (name == "minimal") device(kDots);
    else if (name == "save_dot_with_context_except_mlp") device({T::kQueryProj, T::kKeyProj, T::kValueProj, T::kContext, T::kOutProj});
    else if (name == "save_dot_except_mlpwi") device({T::kQueryProj, T::kKeyProj, T::kValueProj, T::kOutProj, T::kMlpWo});
    else if (name == "save_dot_except_mlp") device({T::kQueryProj, T::kKeyProj, T::kValueProj, T::kOutProj});
    else if (name == "save_qkv_proj") device(kQkv);
    else if (name == "minimal_offloaded") set(kDots, RematAction::kOffload);
    else if (name == "qkv_proj_offloaded") set(kQkv, RematAction::kOffload);
    else
      TITAN_CONFIG_CHECK(name == "full", "activation_checkpoint.policy = \"", name,
                         "\": expected minimal, save_dot_with_context_except_mlp, save_dot_except_mlpwi, "
                         "save_dot_except_mlp, save_qkv_proj, minimal_offloaded, qkv_proj_offloaded, full or custom");
    return p;
  }
  std::array<const char*, kRematTensors> named_by{};
  struct List {
    const std::string* names;
    RematAction action;
    const char* key;
  };
  for (const List& l : {List{&save_on_device, RematAction::kDevice, "save_on_device"},
                        List{&offload_to_host, RematAction::kOffload, "offload_to_host"}})
    for (const std::string& n : split_names(*l.names)) {
      const char* key = l.key;
      const RematAction action = l.action;
      const std::vector<T> ts = tensors_named(n);
      TITAN_CONFIG_CHECK(!ts.empty(), "activation_checkpoint.", key, ": unknown tensor name \"", n,
                         "\" (expected decoder_layer_input, query_proj, key_proj, value_proj, qkv_proj, context, "
                         "out_proj, mlpwi, mlpwi_0, mlpwi_1, mlpwo)");
      for (T t : ts) {
        const char*& by = named_by[static_cast<size_t>(t)];
        TITAN_CONFIG_CHECK(by == nullptr || by == key, "activation_checkpoint: ", remat_tensor_name(t),
                           " is named in both save_on_device and offload_to_host");
        by = key;
        p.action[static_cast<size_t>(t)] = action;
      }
    }
  // Recomputing the block needs its input: not offloaded, it stays on device.
  if (p.of(T::kDecoderLayerInput) == RematAction::kRemat) device({T::kDecoderLayerInput});
  return p;
}

RematTensor linear_remat_tensor(int64_t n, int64_t attention_linears, int64_t mlp_linears) {
  TITAN_CHECK(n >= 0 && n < attention_linears + mlp_linears && attention_linears == 4 && mlp_linears >= 2,
              "remat policy: linear product ", n, " of a block with ", attention_linears, " attention and ",
              mlp_linears, " MLP products (expected q, k, v, out and an MLP with inputs and one output)");
  if (n < 4) return std::array<T, 4>{T::kQueryProj, T::kKeyProj, T::kValueProj, T::kOutProj}[static_cast<size_t>(n)];
  const int64_t m = n - 4;
  if (m == mlp_linears - 1) return T::kMlpWo;
  return m == 0 ? T::kMlpWi0 : T::kMlpWi1;
}

}  // namespace titan
