#include "trainer/simulate/remat_advice.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "trainer/step/parallelize.h"

namespace titan {

using T = RematTensor;

std::array<double, kRematTensors> block_tensor_bytes(const JobConfig& cfg, const ParallelDims& dims, const ModelArgs& a) {
  const double b = static_cast<double>(c10::elementSize(scalar_type(cfg.training.mixed_precision_param)));
  const double tokens = static_cast<double>(cfg.training.local_batch_size) * static_cast<double>(cfg.training.seq_len) /
                        static_cast<double>(dims.cp);
  const double tp = static_cast<double>(dims.tp);
  const double sp = dims.tp > 1 && cfg.parallelism.enable_sequence_parallel ? tp : 1.0;
  const double q = static_cast<double>(a.n_heads * a.head_dim), kv = static_cast<double>(a.n_kv_heads * a.head_dim);
  const double dim = static_cast<double>(a.dim), ffn = static_cast<double>(a.ffn_dim);
  std::array<double, kRematTensors> out{};
  auto set = [&](T t, double elements_per_token) { out[static_cast<size_t>(t)] = tokens * elements_per_token * b; };
  set(T::kDecoderLayerInput, dim / sp);
  set(T::kQueryProj, q / tp);
  set(T::kKeyProj, kv / tp);
  set(T::kValueProj, kv / tp);
  set(T::kContext, q / tp);
  set(T::kOutProj, dim / sp);
  set(T::kMlpWi0, ffn / tp);
  set(T::kMlpWi1, ffn / tp);  // a gated MLP's; an estimate that errs towards keeping more
  set(T::kMlpWo, dim / sp);
  return out;
}

namespace {

double device_bytes(const RematPolicy& p, const std::array<double, kRematTensors>& bytes) {
  double sum = 0;
  for (int i = 0; i < kRematTensors; ++i)
    if (p.action[static_cast<size_t>(i)] == RematAction::kDevice) sum += bytes[static_cast<size_t>(i)];
  return sum;
}

}  // namespace

double kept_bytes_per_block(const JobConfig& cfg, const std::array<double, kRematTensors>& bytes) {
  const auto& ac = cfg.activation_checkpoint;
  const double input = bytes[static_cast<size_t>(T::kDecoderLayerInput)];
  double all = 0;
  for (int i = 0; i < kRematTensors; ++i)
    if (T(i) != T::kMlpWi1) all += bytes[static_cast<size_t>(i)];  // not counted: the MLP may not be gated
  switch (ac.mode) {
    case AcMode::kNone: return all;
    case AcMode::kFull: return input;
    case AcMode::kPolicy: return device_bytes(remat_policy(ac.policy, ac.save_on_device, ac.offload_to_host), bytes);
    case AcMode::kSelective: {
      if (ac.op_level()) return input + bytes[static_cast<size_t>(T::kContext)];
      const double n = static_cast<double>(ac.every());
      return (all * (n - 1) + input) / n;
    }
  }
  return input;
}

std::string remat_advice(const JobConfig& cfg, const ParallelDims& dims, const ModelArgs& a,
                         const devices::MemoryReport& r) {
  if (r.fits || dims.pp > 1) return "";
  const auto bytes = block_tensor_bytes(cfg, dims, a);
  const double kept = kept_bytes_per_block(cfg, bytes);
  const double layers = static_cast<double>(a.n_layers);
  const std::string key = " --activation_checkpoint.mode policy --activation_checkpoint.policy ";
  std::vector<std::pair<std::string, RematPolicy>> candidates;
  for (const std::string& name : named_remat_policies()) candidates.emplace_back(key + name, remat_policy(name));
  candidates.emplace_back(key + "custom --activation_checkpoint.offload_to_host decoder_layer_input",
                          remat_policy("custom", "", "decoder_layer_input"));
  auto gib = [](double v) { return v / static_cast<double>(devices::kGiB); };
  double least = static_cast<double>(r.total);
  for (const auto& [flags, p] : candidates) {
    const double saved = kept - device_bytes(p, bytes);
    if (saved <= 0) continue;
    const double total = static_cast<double>(r.total) - layers * saved;
    least = std::min(least, total);
    if (total > static_cast<double>(r.capacity)) continue;
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "; estimated to fit with%s (about %.1f GiB per chip: %.2f GiB fewer kept per block over %lld blocks; "
                  "an estimate from the named tensors, not a walk)",
                  flags.c_str(), gib(total), gib(saved), static_cast<long long>(a.n_layers));
    return buf;
  }
  const bool named_only = cfg.activation_checkpoint.mode != AcMode::kPolicy && cfg.activation_checkpoint.mode != AcMode::kFull;
  char buf[400];
  std::snprintf(buf, sizeof(buf), "; no remat policy fits by estimate (the least: about %.1f GiB per chip%s)", gib(least),
                named_only ? ", counting only the named tensors this mode keeps: it keeps more, so also try "
                             "--activation_checkpoint.mode full"
                           : "");
  return buf;
}

}  // namespace titan
