#include "trainer/parallelize.h"

#include "devices/error.h"
#include "parallel/activation_checkpoint.h"

namespace titan {
torch::ScalarType dtype_named(const std::string& name) {
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  return torch::kFloat32;
}

namespace {

std::vector<NamedModule> weight_modules_under(torch::nn::Module& parent, const std::string& prefix) {
  std::vector<NamedModule> out;
  for (auto& item : parent.named_modules(prefix, /*include_self=*/false)) {
    if (auto w = std::dynamic_pointer_cast<WeightModule>(item.value())) out.push_back({item.key(), w});
  }
  return out;
}

}  // namespace

std::vector<NamedModule> root_modules(Transformer& model) {
  std::vector<NamedModule> root = {{"tok_embeddings", model->tok_embeddings.ptr()},
                                   {"norm", model->norm.ptr()}};
  if (model->output) root.push_back({"output", model->output.ptr()});
  return root;
}

std::vector<std::vector<NamedModule>> block_modules(Transformer& model) {
  std::vector<std::vector<NamedModule>> blocks;
  for (size_t i = 0; i < model->layers.size(); ++i) {
    blocks.push_back(weight_modules_under(*model->layers[i], "layers." + std::to_string(i)));
  }
  return blocks;
}

ParallelizedModel parallelize(Transformer& model, DeviceMesh& mesh, const JobConfig& cfg) {
  ParallelizedModel out;
  // Activation checkpointing goes inside FSDP (installed first, so it is the inner wrapper):
  // the recomputed forward then runs on parameters FSDP has gathered again.
  if (cfg.activation_checkpoint.mode != "none") {
    model->block_wrappers.push_back(activation_checkpoint_wrapper(cfg.activation_checkpoint.mode,
                                                                  cfg.activation_checkpoint.selective_every));
  }
  const bool data_parallel = mesh.size("fsdp") > 1 || mesh.size("dp_replicate") > 1;
  if (data_parallel) {
    FsdpOptions o;
    o.reshard_after_forward = cfg.parallelism.fsdp_reshard_after_forward;
    o.param_dtype = dtype_named(cfg.training.mixed_precision_param);
    o.reduce_dtype = dtype_named(cfg.training.mixed_precision_reduce);
    out.fsdp = std::make_unique<Fsdp>(mesh["fsdp"], mesh["dp_replicate"], o, root_modules(model),
                                      block_modules(model));
    model->forward_wrap = out.fsdp->root_wrapper();
    model->block_wrappers.insert(model->block_wrappers.begin(), out.fsdp->block_wrapper());
  }
  return out;
}

}  // namespace titan
