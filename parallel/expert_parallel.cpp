#include "parallel/expert_parallel.h"

#include <numeric>

#include "common/error.h"

namespace titan {

void check_expert_parallel(int64_t ep, int64_t dp_shard, int64_t cp, int64_t experts) {
  TITAN_CONFIG_CHECK(ep >= 1, "parallelism.expert_parallel_degree must be >= 1, got ", ep);
  if (ep == 1) return;
  TITAN_CONFIG_CHECK(experts > 0, "parallelism.expert_parallel_degree (", ep,
                     ") > 1 needs a mixture-of-experts model (model.moe_experts is 0)");
  TITAN_CONFIG_CHECK(experts % ep == 0, "parallelism.expert_parallel_degree (", ep,
                     ") must divide the experts per block (model.moe_experts = ", experts, ")");
  TITAN_CONFIG_CHECK((dp_shard * cp) % ep == 0, "parallelism.expert_parallel_degree (", ep,
                     ") must divide data_parallel_shard_degree x context_parallel_degree (", dp_shard, " x ", cp,
                     " = ", dp_shard * cp, "): expert parallelism borrows those ranks, as TorchTitan does");
}

void check_expert_tensor_parallel(int64_t etp, int64_t tp, int64_t experts, int64_t moe_ffn_dim,
                                  int64_t shared_ffn_dim) {
  TITAN_CONFIG_CHECK(etp >= 1, "parallelism.expert_tensor_parallel_degree must be >= 1, got ", etp);
  if (etp == 1) return;
  TITAN_CONFIG_CHECK(etp == tp, "parallelism.expert_tensor_parallel_degree (", etp,
                     ") must be 1 (experts whole on every tensor-parallel rank) or parallelism.tensor_parallel_degree (",
                     tp, ": experts sharded over tp), the two values TorchTitan allows");
  TITAN_CONFIG_CHECK(experts > 0, "parallelism.expert_tensor_parallel_degree (", etp,
                     ") > 1 needs a mixture-of-experts model (model.moe_experts is 0)");
  TITAN_CONFIG_CHECK(moe_ffn_dim % etp == 0, "parallelism.expert_tensor_parallel_degree (", etp,
                     ") must divide the experts' hidden size (model.moe_ffn_dim = ", moe_ffn_dim, ")");
  TITAN_CONFIG_CHECK(shared_ffn_dim % etp == 0, "parallelism.expert_tensor_parallel_degree (", etp,
                     ") must divide the shared expert's hidden size (model.moe_shared_ffn_dim = ", shared_ffn_dim, ")");
}

namespace {

struct ScaleGradient : public torch::autograd::Function<ScaleGradient> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, double factor) {
    ctx->saved_data["factor"] = factor;
    return x.view_as(x);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    return {grads[0] * ctx->saved_data["factor"].toDouble(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor scale_gradient(const torch::Tensor& x, double factor) { return ScaleGradient::apply(x, factor); }

ExpertGroups build_expert_groups(DeviceMesh& mesh, int64_t ep) {
  const std::vector<int> fsdp = mesh.group_ranks({"dp_shard", "cp"});
  const int64_t n = static_cast<int64_t>(fsdp.size());
  TITAN_CHECK(ep >= 1 && n % ep == 0, "expert parallel degree ", ep, " does not divide the fsdp group of ", n);
  const int64_t f = mesh.coordinate("fsdp");
  std::vector<int> ep_ranks, efsdp_ranks;
  for (int64_t i = 0; i < ep; ++i) ep_ranks.push_back(fsdp[(f / ep) * ep + i]);
  for (int64_t j = 0; j < n / ep; ++j) efsdp_ranks.push_back(fsdp[j * ep + f % ep]);
  ExpertGroups g;
  // Named with their sizes ("ep4", "efsdp2"): the simulator's placement finds them inside
  // dp_shard x cp from the name alone (devices/placement.h).
  g.ep = mesh.world()->new_group(ep_ranks, "ep" + std::to_string(ep));
  g.efsdp = ep == 1 ? mesh["fsdp"] : mesh.world()->new_group(efsdp_ranks, "efsdp" + std::to_string(n / ep));
  return g;
}

namespace {

struct AllToAllRows : public torch::autograd::Function<AllToAllRows> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               std::vector<int64_t> out_splits, std::vector<int64_t> in_splits, int64_t comm) {
    auto* c = reinterpret_cast<Communicator*>(comm);
    ctx->saved_data["out"] = out_splits;
    ctx->saved_data["in"] = in_splits;
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["row_shape"] = x.sizes().slice(1).vec();
    ctx->saved_data["dtype"] = x.scalar_type();
    const int64_t rows = std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0});
    std::vector<int64_t> shape = x.sizes().vec();
    shape[0] = rows;
    auto out = torch::empty(shape, x.options());
    c->all_to_all_single(out, x.contiguous(), std::move(out_splits), std::move(in_splits))->wait();
    return out;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto* c = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    auto out_splits = ctx->saved_data["out"].toIntVector();
    auto in_splits = ctx->saved_data["in"].toIntVector();
    // Every rank runs the reverse exchange (its peers wait for it), with zeros where autograd
    // handed no gradient.
    auto row_shape = ctx->saved_data["row_shape"].toIntVector();
    torch::Tensor g = grads[0];
    if (!g.defined()) {
      std::vector<int64_t> out_shape = row_shape;
      out_shape.insert(out_shape.begin(), std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0}));
      g = torch::zeros(out_shape, torch::TensorOptions().dtype(ctx->saved_data["dtype"].toScalarType()));
    }
    const int64_t rows = std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0});
    std::vector<int64_t> shape = g.sizes().vec();
    shape[0] = rows;
    auto back = torch::empty(shape, g.options());
    // The reverse exchange: what arrived by out_splits returns by them.
    c->all_to_all_single(back, g.contiguous(), in_splits, out_splits)->wait();
    return {back, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor all_to_all_rows(const torch::Tensor& x, const std::vector<int64_t>& out_splits,
                              const std::vector<int64_t>& in_splits, Communicator& comm) {
  return AllToAllRows::apply(x, out_splits, in_splits, reinterpret_cast<int64_t>(&comm));
}

torch::Tensor expert_parallel_dispatch(const torch::Tensor& routed, const std::vector<int64_t>& counts,
                                       const LocalExperts& local_experts, Communicator& ep) {
  const int64_t P = ep.size(), E = static_cast<int64_t>(counts.size());
  TITAN_CHECK(E % P == 0, "expert parallel dispatch: ", E, " experts over ", P, " ranks");
  const int64_t L = E / P, me = ep.rank();
  // recv[s * L + e]: rows peer s sends for local expert e.
  std::vector<int64_t> recv(static_cast<size_t>(E));
  {
    auto sent = torch::tensor(counts, torch::kInt64);
    auto got = torch::empty({E}, torch::kInt64);
    if (routed.is_meta()) {
      // Recorded at its size; every rank assumed to route alike.
      auto meta = torch::TensorOptions().device(torch::kMeta).dtype(torch::kInt64);
      ep.all_to_all(torch::empty({E}, meta), torch::empty({E}, meta))->wait();
      for (int64_t s = 0; s < P; ++s)
        for (int64_t e = 0; e < L; ++e) recv[s * L + e] = counts[me * L + e];
    } else {
      ep.all_to_all(got, sent)->wait();
      recv.assign(got.data_ptr<int64_t>(), got.data_ptr<int64_t>() + E);
    }
  }
  std::vector<int64_t> in_splits(P, 0), out_splits(P, 0), local_counts(L, 0);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t e = 0; e < L; ++e) {
      in_splits[p] += counts[p * L + e];
      out_splits[p] += recv[p * L + e];
      local_counts[e] += recv[p * L + e];
    }
  auto arrived = all_to_all_rows(routed, out_splits, in_splits, ep);  // by source, then local expert
  // Regroup by local expert (then source): row order[j] of `arrived` is row j of the grouped
  // tokens; its inverse puts the outputs back in arrival order.
  std::vector<int64_t> start(static_cast<size_t>(P * L));
  for (int64_t i = 0, at = 0; i < P * L; ++i) start[i] = at, at += recv[i];
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(arrived.size(0)));
  for (int64_t e = 0; e < L; ++e)
    for (int64_t s = 0; s < P; ++s)
      for (int64_t k = 0; k < recv[s * L + e]; ++k) order.push_back(start[s * L + e] + k);
  // Rows gathered with index() (advanced indexing): index_select has no meta kernel in
  // libtorch 1.13. A permutation, so its backward's accumulating put adds one value per row.
  torch::Tensor out;
  if (L == 1 || P == 1) {
    // One local expert, or one source: arrival order is already grouped by local expert.
    out = local_experts(arrived, local_counts);
  } else {
    torch::Tensor idx, inverse;
    if (routed.is_meta()) {
      // No data to permute: the permutation is only a cost of its size.
      idx = inverse = torch::empty({arrived.size(0)}, arrived.options().dtype(torch::kInt64));
    } else {
      idx = torch::tensor(order, torch::kInt64);
      inverse = torch::empty_like(idx);
      inverse.index_put_({idx}, torch::arange(idx.size(0), torch::kInt64));
    }
    out = local_experts(arrived.index({idx}), local_counts).index({inverse});
  }
  // Experts that received no token return an empty tensor outside the graph; taken from
  // `arrived` instead, the return exchange stays in this rank's backward, so its reverse
  // exchange meets the peers' (measured: skipped, EP 4 hung at step 15 of the debug MoE).
  if (arrived.size(0) == 0 && arrived.requires_grad()) out = arrived.mul(0);
  return all_to_all_rows(out, in_splits, out_splits, ep);
}

}  // namespace titan
