#include "trainer/step/expert_plan.h"

#include <algorithm>

#include "common/error.h"
#include "trainer/model/moe.h"

namespace titan {

void check_expert_parallel_config(const JobConfig& cfg, const ModelArgs& args, const DeviceMesh& mesh) {
  const auto& p = cfg.parallelism;
  check_expert_parallel(p.expert_parallel_degree, mesh.size("dp_shard"), mesh.size("cp"), args.is_moe() ? args.moe_experts : 0);
}

bool is_expert_module(const std::string& name) { return name.find(".moe.experts.") != std::string::npos; }

void apply_expert_parallel(Transformer& model, std::shared_ptr<Communicator> ep_group) {
  Communicator& ep = *ep_group;
  if (ep.size() == 1) return;
  struct Dispatch : ExpertDispatch {
    explicit Dispatch(std::shared_ptr<Communicator> c) : comm(std::move(c)) {}
    torch::Tensor run(const torch::Tensor& routed, const std::vector<int64_t>& counts,
                      const LocalExpertsFn& local) override {
      return expert_parallel_dispatch(routed, counts, local, *comm);
    }
    std::shared_ptr<Communicator> comm;
  };
  auto dispatch = std::make_shared<Dispatch>(ep_group);
  torch::NoGradGuard no_grad;
  for (auto& block : model->layers) {
    if (!block || !block->moe) continue;
    MoEImpl& moe = *block->moe;
    // Under pipeline parallelism the EP group is this stage's (every mesh group is taken at
    // this rank's pp coordinate); another stage's block was freed by the pipeline plan and
    // never runs here.
    if (moe.experts->w1->weight.numel() == 0) continue;
    const int64_t local = moe.n_experts / ep.size();
    for (auto* w : {&moe.experts->w1, &moe.experts->w2, &moe.experts->w3}) {
      torch::Tensor param = (*w)->weight;  // the registered parameter (same TensorImpl)
      // set_data keeps the parameter object the module registered and the optimizer will see.
      param.set_data(param.detach().narrow(0, ep.rank() * local, local).clone());
    }
    moe.dispatch = dispatch;
  }
}

std::vector<std::vector<NamedModule>> expert_modules(Transformer& model) {
  std::vector<std::vector<NamedModule>> out(model->layers.size());
  for (size_t i = 0; i < model->layers.size(); ++i) {
    auto& block = model->layers[i];
    if (!block || !block->moe) continue;
    const std::string prefix = "layers." + std::to_string(i) + ".moe.experts.";
    auto& e = block->moe->experts;
    out[i] = {{prefix + "w1", e->w1.ptr()}, {prefix + "w2", e->w2.ptr()}, {prefix + "w3", e->w3.ptr()}};
  }
  return out;
}

void sum_expert_load_over(Transformer& model, std::vector<std::shared_ptr<Communicator>> groups) {
  groups.erase(std::remove_if(groups.begin(), groups.end(), [](const auto& g) { return g->size() == 1; }),
               groups.end());
  if (!model->args.is_moe() || groups.empty()) return;
  model->reduce_expert_load = [groups](std::vector<torch::Tensor>& loads) {
    for (const auto& g : groups) g->all_reduce(loads, ReduceOp::kSum)->wait();
  };
}

}  // namespace titan
