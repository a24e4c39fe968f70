#include "trainer/model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "trainer/model/grouped_matmul.h"

namespace titan {
namespace {

// Adds the auxiliary loss to the training loss without changing the forward: the block's
// output passes through unchanged and the backward hands the loss gradient 1 to `aux` (as if
// it were added to the loss the trainer differentiates). The trainer's loss plumbing (micro-
// batches, pipeline stages, activation checkpointing's recompute) then needs no change.
struct AddAuxLoss : public torch::autograd::Function<AddAuxLoss> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x, const torch::Tensor& aux) {
    (void)aux;
    return x.view_as(x);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext*, torch::autograd::tensor_list grads) {
    return {grads[0], torch::ones({}, grads[0].options().dtype(torch::kFloat32))};
  }
};

std::vector<MoEImpl*> moe_blocks(Transformer& model) {
  std::vector<MoEImpl*> out;
  for (auto& b : model->layers)
    if (b && b->moe) out.push_back(b->moe.get());
  return out;
}

}  // namespace

MetaRouting::Kind meta_routing_kind(const std::string& name) {
  if (name == "uniform") return MetaRouting::Kind::kUniform;
  if (name == "skewed") return MetaRouting::Kind::kSkewed;
  TITAN_CONFIG_FAIL("simulation.moe_routing '", name, "' is not known: expected uniform or skewed");
}

std::vector<int64_t> meta_expert_counts(int64_t tokens, int64_t top_k, int64_t experts, const MetaRouting& r) {
  TITAN_CHECK(experts > 0 && top_k > 0 && top_k <= experts, "meta routing: top_k ", top_k, " of ", experts, " experts");
  const int64_t total = tokens * top_k;
  std::vector<double> share(static_cast<size_t>(experts), 1.0);
  if (r.kind == MetaRouting::Kind::kSkewed)
    for (int64_t i = 0; i < experts; ++i) share[static_cast<size_t>(i)] = 1.0 / std::pow(double(i + 1), r.zipf);
  // Water-filling: an expert holds at most `tokens` slots (each token picks distinct experts);
  // what a capped expert cannot take goes to the others in proportion to their shares.
  std::vector<double> want(static_cast<size_t>(experts), 0.0);
  std::vector<bool> capped(static_cast<size_t>(experts), false);
  double left = static_cast<double>(total);
  for (int64_t round = 0; round < experts && left > 0.5; ++round) {
    double sum = 0;
    for (int64_t i = 0; i < experts; ++i)
      if (!capped[static_cast<size_t>(i)]) sum += share[static_cast<size_t>(i)];
    bool newly = false;
    for (int64_t i = 0; i < experts; ++i) {
      const size_t u = static_cast<size_t>(i);
      if (capped[u] || want[u] + left * share[u] / sum <= double(tokens)) continue;
      capped[u] = newly = true;
    }
    if (newly) {
      // Cap them, and spread the rest again.
      left = static_cast<double>(total);
      for (int64_t i = 0; i < experts; ++i) {
        const size_t u = static_cast<size_t>(i);
        want[u] = capped[u] ? double(tokens) : 0.0;
        left -= want[u];
      }
      continue;
    }
    for (int64_t i = 0; i < experts; ++i)
      if (!capped[static_cast<size_t>(i)]) want[static_cast<size_t>(i)] += left * share[static_cast<size_t>(i)] / sum;
    left = 0;
  }
  // Integers summing to N k: floors, then the largest remainders.
  std::vector<int64_t> counts(static_cast<size_t>(experts));
  int64_t assigned = 0;
  for (int64_t i = 0; i < experts; ++i) {
    counts[static_cast<size_t>(i)] = static_cast<int64_t>(std::floor(want[static_cast<size_t>(i)]));
    assigned += counts[static_cast<size_t>(i)];
  }
  std::vector<int64_t> order(static_cast<size_t>(experts));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double ra = want[static_cast<size_t>(a)] - std::floor(want[static_cast<size_t>(a)]);
    const double rb = want[static_cast<size_t>(b)] - std::floor(want[static_cast<size_t>(b)]);
    return ra > rb;
  });
  for (size_t j = 0; assigned < total; j = (j + 1) % order.size()) {
    int64_t& c = counts[static_cast<size_t>(order[j])];
    if (c < tokens) ++c, ++assigned;
  }
  return counts;
}

ExpertWeightsImpl::ExpertWeightsImpl(int64_t experts, int64_t out, int64_t in, const torch::TensorOptions& opts) {
  weight = register_parameter("weight", torch::empty({experts, out, in}, opts));
}

GroupedExpertsImpl::GroupedExpertsImpl(int64_t experts, int64_t dim, int64_t hidden, const torch::TensorOptions& opts) {
  w1 = register_module("w1", ExpertWeights(experts, hidden, dim, opts));
  w2 = register_module("w2", ExpertWeights(experts, dim, hidden, opts));
  w3 = register_module("w3", ExpertWeights(experts, hidden, dim, opts));
}

torch::Tensor GroupedExpertsImpl::forward(const torch::Tensor& tokens, const std::vector<int64_t>& counts) {
  // One grouped matmul per projection, as frameworks run the experts (one kernel each, whose
  // tiles from all experts share the machine's waves): gate and up, the SwiGLU on all rows at
  // once (elementwise: per expert up to the vectorised silu's roundoff), then down.
  if (grouped) {
    auto h = torch::silu(grouped_mm(tokens, w1->weight, counts)) * grouped_mm(tokens, w3->weight, counts);
    return grouped_mm(h, w2->weight, counts);
  }
  TITAN_CHECK(static_cast<int64_t>(counts.size()) == w1->weight.size(0), "grouped experts: ", counts.size(),
              " token counts for ", w1->weight.size(0), " experts");
  // unbind / split: one gradient stack / concatenation each, as in grouped_mm.
  auto g_e = w1->weight.unbind(0), d_e = w2->weight.unbind(0), u_e = w3->weight.unbind(0);
  auto blocks = tokens.split_with_sizes(counts, 0);
  std::vector<torch::Tensor> outs;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] == 0) continue;
    auto h = torch::silu(torch::mm(blocks[e], g_e[e].t())) * torch::mm(blocks[e], u_e[e].t());
    outs.push_back(torch::mm(h, d_e[e].t()));
  }
  if (outs.empty()) return torch::zeros({0, w2->weight.size(1)}, tokens.options());
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 0);
}

MoEImpl::MoEImpl(const ModelArgs& a, const torch::TensorOptions& opts)
    : n_experts(a.moe_experts),
      top_k(a.moe_top_k),
      norm_topk_prob(a.moe_norm_topk_prob),
      aux_loss_coeff(a.moe_aux_loss_coeff),
      bias_update_coeff(a.moe_bias_update_coeff),
      capacity_factor(a.moe_capacity_factor) {
  check_moe_args(a);
  router = register_module("router", Linear(a.dim, a.moe_experts, opts));
  experts = register_module("experts", GroupedExperts(a.moe_experts, a.dim, a.moe_ffn_dim, opts));
  experts->grouped = a.moe_grouped_mm;
  if (a.moe_shared_ffn_dim > 0) {
    ModelArgs shared = a;
    shared.ffn_dim = a.moe_shared_ffn_dim;
    shared_expert = register_module("shared_expert", FeedForward(shared, opts));
  }
  auto f32 = opts.dtype(torch::kFloat32);
  expert_bias = register_buffer("expert_bias", torch::zeros({a.moe_experts}, f32));
  tokens_per_expert = register_buffer("tokens_per_expert", torch::zeros({a.moe_experts}, f32));
}

Routing MoEImpl::route(const torch::Tensor& flat) {
  Routing r;
  r.scores = torch::softmax(router(flat).to(torch::kFloat32), -1);
  {
    torch::NoGradGuard no_grad;
    auto choose = bias_update_coeff > 0 ? r.scores + expert_bias : r.scores;
    r.indices = std::get<1>(choose.topk(top_k, -1));
  }
  r.weights = r.scores.gather(1, r.indices);
  if (norm_topk_prob) r.weights = r.weights / r.weights.sum(-1, /*keepdim=*/true);
  return r;
}

torch::Tensor MoEImpl::forward(const torch::Tensor& x) {
  return apply_wrap(wrap, x, [this](const torch::Tensor& t) { return forward_local(t); });
}

torch::Tensor MoEImpl::forward_local(const torch::Tensor& x) {
  const int64_t D = x.size(-1);
  auto flat = x.reshape({-1, D});
  const int64_t N = flat.size(0);
  Routing r = route(flat);
  const bool meta = flat.is_meta();
  const bool training = torch::GradMode::is_enabled();  // read before the no-grad routing below
  const int64_t cap = capacity_factor > 0
                          ? static_cast<int64_t>(std::ceil(capacity_factor * double(N * top_k) / double(n_experts)))
                          : N * top_k;
  std::vector<int64_t> counts;
  torch::Tensor order, load;  // order: routed slots (token * k + j) grouped by expert
  auto i64 = flat.options().dtype(torch::kInt64);
  if (meta) {
    counts = meta_expert_counts(N, top_k, n_experts, meta_routing);
    int64_t kept = 0;
    for (auto& c : counts) kept += (c = std::min(c, cap));
    dropped = N * top_k - kept;
    order = torch::empty({kept}, i64);
    load = torch::empty({n_experts}, flat.options().dtype(torch::kFloat32));
  } else {
    torch::NoGradGuard no_grad;
    auto slots = r.indices.reshape({-1});
    auto sorted = slots.sort(/*stable=*/true, 0, /*descending=*/false);
    order = std::get<1>(sorted);
    auto per_expert = torch::bincount(slots, {}, n_experts);
    load = per_expert.to(torch::kFloat32);
    auto c = per_expert.contiguous();
    counts.assign(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + n_experts);
    dropped = 0;
    if (capacity_factor > 0) {
      // Within each expert, slots in token order; those past the capacity are dropped (their
      // tokens keep the residual only), as in Switch / GShard.
      auto starts = per_expert.cumsum(0) - per_expert;
      auto position = torch::arange(slots.size(0), i64) - starts.index_select(0, std::get<0>(sorted));
      order = order.masked_select(position < cap);
      for (auto& n : counts) dropped += n - std::min(n, cap), n = std::min(n, cap);
    }
    // The routing's load (before any drop), counted in grad mode only: activation
    // checkpointing's first forward runs without it and its recompute with it, so each step
    // counts every token once.
    if (training) tokens_per_expert.add_(load);
  }
  auto token = order.div(top_k, "floor");
  // Row lookups by index (index_select has no meta kernel in libtorch 1.13).
  auto weight = r.weights.reshape({-1}).index({order}).to(x.scalar_type()).unsqueeze(1);
  auto routed = flat.index({token});
  LocalExpertsFn local = [this](const torch::Tensor& t, const std::vector<int64_t>& c) { return experts->forward(t, c); };
  auto expert_out = dispatch ? dispatch->run(routed, counts, local) : local(routed, counts);
  // Accumulating index_put (index_add's backward takes index_select, which has no meta
  // kernel); on the CPU it adds rows in order, as index_add does.
  auto out = torch::zeros_like(flat).index_put({token}, expert_out * weight, /*accumulate=*/true);
  if (shared_expert) out = out + shared_expert->forward(flat);
  if (aux_loss_coeff > 0 && training) {
    // E * sum_i f_i P_i: f_i the fraction of tokens that chose expert i (HF's, summing to k
    // over experts), P_i the mean router probability of i; per block, weighted by this
    // forward's share of the batch's tokens. The statistics may be combined with other ranks'
    // (combine_routing_stats), and then count their tokens too.
    auto stats = torch::cat({load, r.scores.sum(0), torch::full({1}, double(N), load.options())});
    if (combine_routing_stats) stats = combine_routing_stats(stats);
    auto tokens = stats.narrow(0, 2 * n_experts, 1).squeeze(0);
    auto f = stats.narrow(0, 0, n_experts) / tokens;
    auto P = stats.narrow(0, n_experts, n_experts) / tokens;
    auto aux = (f * P).sum() * (aux_loss_coeff * double(n_experts));
    if (aux_normalizer > 0) aux = aux * (tokens / aux_normalizer);
    last_aux_loss = aux.detach();
    out = AddAuxLoss::apply(out, aux);
  }
  return out.view(x.sizes());
}

void set_meta_routing(Transformer& model, const MetaRouting& r) {
  for (MoEImpl* m : moe_blocks(model)) m->meta_routing = r;
}

void set_moe_aux_normalizer(Transformer& model, double tokens) {
  for (MoEImpl* m : moe_blocks(model)) m->aux_normalizer = tokens;
}

double moe_aux_loss(Transformer& model) {
  double sum = 0;
  for (MoEImpl* m : moe_blocks(model))
    if (m->last_aux_loss.defined() && !m->last_aux_loss.is_meta()) sum += m->last_aux_loss.item<double>();
  return sum;
}

void update_expert_bias(Transformer& model) {
  std::vector<MoEImpl*> blocks;
  std::vector<torch::Tensor> loads;
  for (MoEImpl* m : moe_blocks(model)) {
    if (m->bias_update_coeff <= 0 || m->tokens_per_expert.is_meta()) continue;
    blocks.push_back(m);
    loads.push_back(m->tokens_per_expert);
  }
  if (blocks.empty()) return;
  if (model->reduce_expert_load) model->reduce_expert_load(loads);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const torch::Tensor& load = loads[i];
    auto delta = torch::sign(load.mean() - load) * blocks[i]->bias_update_coeff;
    blocks[i]->expert_bias.add_(delta - delta.mean());
    blocks[i]->tokens_per_expert.zero_();
  }
}

void reset_expert_load(Transformer& model) {
  torch::NoGradGuard no_grad;
  for (MoEImpl* m : moe_blocks(model))
    if (m->tokens_per_expert.defined() && !m->tokens_per_expert.is_meta()) m->tokens_per_expert.zero_();
}

}  // namespace titan
