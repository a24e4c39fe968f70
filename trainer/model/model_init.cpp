// Weight initialisation: each parameter drawn from its own generator seeded by its name, so a
// parameter's initial values do not depend on the mesh, the order of creation or the build.
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <string>

#include "trainer/model/model.h"

namespace titan {
namespace {

// FNV-1a: a hash that is the same on every build, unlike std::hash.
uint64_t stable_hash(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

void TransformerImpl::init_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  const double base_std = 0.02;
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    if (p.is_meta()) continue;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(stable_hash(name, seed));
    auto full = torch::empty(p.sizes(), torch::TensorOptions().dtype(torch::kFloat32));
    auto ends_with = [&](const std::string& s) {
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends_with("norm.weight")) {
      full.fill_(1.0);
    } else {
      double std = base_std;
      if (name == "tok_embeddings.weight") {
        std = args.tie_embeddings ? 1.0 / std::sqrt(double(args.dim)) : 1.0;
      } else if (name == "output.weight") {
        std = 1.0 / std::sqrt(double(args.dim));
      } else if (ends_with("wo.weight") || ends_with("w2.weight") || ends_with("w3.weight")) {
        // Depth-scaled init for the projections that write into the residual stream.
        const int64_t layer = std::stoll(name.substr(7, name.find('.', 7) - 7));
        std = base_std / std::sqrt(2.0 * (layer + 1));
      }
      full.normal_(0.0, std, gen);
    }
    p.copy_(full);
  }
}

}  // namespace titan
