#include "trainer/step/pipeline_model.h"

#include <algorithm>
#include <iostream>
#include <set>

#include "common/error.h"
#include "parallel/fsdp_observer.h"
#include "trainer/step/parallelize.h"

namespace titan {
namespace {

// "layers.7.attention.wq.weight" -> 7; -1 for the embedding, norm and output.
int64_t layer_of(const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return -1;
  return std::stoll(name.substr(7, name.find('.', 7) - 7));
}

}  // namespace

PipelinePlan plan_pipeline(const JobConfig& cfg, const ModelArgs& args, int64_t pp, bool fsdp) {
  const auto& p = cfg.parallelism;
  const int64_t microbatch_size = p.pipeline_parallel_microbatch_size;
  const int64_t local_bs = cfg.training.local_batch_size;
  TITAN_CONFIG_CHECK(local_bs % microbatch_size == 0, "training.local_batch_size (", local_bs,
                     ") must be a multiple of parallelism.pipeline_parallel_microbatch_size (", microbatch_size, ")");
  // Each micro-batch is a dozen actions per stage in the schedule's lists: a count past this
  // would build lists of gigabytes before anything else could refuse the size.
  constexpr int64_t kMaxMicrobatches = int64_t{1} << 16;
  TITAN_CONFIG_CHECK(local_bs / microbatch_size <= kMaxMicrobatches, "training.local_batch_size (", local_bs,
                     ") / parallelism.pipeline_parallel_microbatch_size (", microbatch_size, ") gives ",
                     local_bs / microbatch_size, " micro-batches per schedule run; at most ", kMaxMicrobatches,
                     " are scheduled (raise the micro-batch size or lower the local batch)");
  const int m = static_cast<int>(local_bs / microbatch_size);
  PipelineSplitOptions o;
  o.degree = pp;
  o.layers_per_stage = p.pipeline_parallel_layers_per_stage;
  o.first_stage_less_layers = p.pipeline_parallel_first_stage_less_layers;
  o.last_stage_less_layers = p.pipeline_parallel_last_stage_less_layers;
  PipelinePlan plan;
  if (!p.pipeline_parallel_schedule_csv.empty()) {
    plan.schedule = load_pipeline_schedule_csv(p.pipeline_parallel_schedule_csv, static_cast<int>(pp), m);
    plan.stages = split_stages(args.n_layers, plan.schedule.num_stages, o);
  } else {
    const std::string name = to_string(p.pipeline_parallel_schedule);
    o.single_stage_schedule = single_stage_schedule(name);
    const int64_t num_stages = pipeline_num_stages(args.n_layers, o);
    plan.stages = split_stages(args.n_layers, num_stages, o);
    plan.schedule = make_pipeline_schedule(name, static_cast<int>(pp), static_cast<int>(num_stages), m, fsdp);
  }
  return plan;
}

PipelineModel::PipelineModel(const JobConfig& cfg, const ModelArgs& args, DeviceMesh& mesh, PipelinePlan plan,
                             bool on_meta) {
  const auto& p = cfg.parallelism;
  stages_ = std::move(plan.stages);
  schedule_ = std::move(plan.schedule);
  microbatch_size_ = p.pipeline_parallel_microbatch_size;
  rank_ = static_cast<int>(mesh.coordinate("pp"));
  local_stages_ = schedule_.stages_of(rank_);
  const int64_t tp = mesh.size("tp");
  const bool sp = tp > 1 && p.enable_sequence_parallel;
  const int64_t seq = cfg.training.seq_len / cfg.parallelism.context_parallel_degree;  // context parallel's share
  seq_local_ = sp ? seq / tp : seq;
  dim_ = args.dim;
  activation_options_ = torch::TensorOptions().dtype(scalar_type(cfg.training.mixed_precision_param));
  if (on_meta) activation_options_ = activation_options_.device(torch::kMeta);
  if (p.pipeline_parallel_print_schedule && mesh.world()->rank() == 0) {
    std::cout << format_pipeline_schedule(schedule_);
    for (size_t s = 0; s < stages_.size(); ++s) {
      std::cout << "stage " << s << " (rank " << schedule_.stage_rank[s] << "): layers [" << stages_[s].begin << ", "
                << stages_[s].end << ")" << (stages_[s].embedding ? " + embedding" : "")
                << (stages_[s].output ? " + norm, output" : "") << "\n";
    }
    std::cout << std::flush;
  }
  runtime_ = std::make_unique<PipelineRuntime>(schedule_, rank_, mesh["pp"], &store_);
  const int first = schedule_.stage_rank.front(), last = schedule_.stage_rank.back();
  runs_embedding_ = first == rank_, runs_output_ = last == rank_;
  tied_ = args.tie_embeddings;
  if (tied_ && first != last && (runs_embedding_ || runs_output_)) {
    // Only the two members build it (World::new_group), the same on both: this (dp, tp)
    // coordinate's ranks at the first and the last pipeline coordinate.
    const auto& names = mesh.dim_names();
    const size_t pp_dim = static_cast<size_t>(std::find(names.begin(), names.end(), "pp") - names.begin());
    std::vector<int64_t> c = mesh.coordinate();
    c[pp_dim] = first;
    const int a = mesh.rank_at(c);
    c[pp_dim] = last;
    tied_group_ = mesh.world()->new_group({a, mesh.rank_at(c)}, "pp_ends");
  }
}

void PipelineModel::sum_tied_gradients(const torch::Tensor& param, Fsdp* fsdp) {
  if (!tied_group_) return;
  torch::Tensor grad = param.mutable_grad();
  // A rank whose backward left no gradient (none can, the loss reaches both uses) would
  // still have to join the peer's collective: give it zeros.
  if (!grad.defined()) {
    param.mutable_grad() = torch::zeros_like(param);
    grad = param.mutable_grad();
  }
  note_shard_collective(fsdp, "all_reduce", *tied_group_, {param}, {grad});
  tied_group_->all_reduce(grad, ReduceOp::kSum)->wait();
}

PipelineModel::~PipelineModel() = default;

bool PipelineModel::holds_layer(int64_t layer) const {
  for (int s : local_stages_)
    if (layer >= stages_[s].begin && layer < stages_[s].end) return true;
  return false;
}

int PipelineModel::owner(const std::string& name) const {
  const int64_t layer = layer_of(name);
  for (size_t s = 0; s < stages_.size(); ++s) {
    const StageLayers& st = stages_[s];
    const bool here = layer >= 0 ? layer >= st.begin && layer < st.end
                                 : (name.rfind("tok_embeddings.", 0) == 0 ? st.embedding : st.output);
    if (here) return schedule_.stage_rank[s];
  }
  TITAN_FAIL("pipeline: no stage holds parameter ", name);
}

bool PipelineModel::holds(const std::string& name) const {
  return owner(name) == rank_ || (tied_ && runs_output_ && name == "tok_embeddings.weight");
}

void PipelineModel::apply(Transformer& model, ParallelizedModel& plan) {
  torch::NoGradGuard no_grad;
  std::set<const c10::TensorImpl*> freed;
  for (auto& item : model->named_parameters()) {
    if (holds(item.key())) continue;
    item.value().set_data(torch::empty({0}, item.value().options()));
    freed.insert(item.value().unsafeGetTensorImpl());
  }
  auto kept = [&](const torch::Tensor& t) { return !freed.count(t.unsafeGetTensorImpl()); };
  std::vector<torch::Tensor> partial, sharded;
  std::vector<int64_t> dims, replicas;
  for (auto& t : plan.tp_partial_grads)
    if (kept(t)) partial.push_back(t);
  for (size_t i = 0; i < plan.tp_sharded.size(); ++i) {
    if (!kept(plan.tp_sharded[i])) continue;
    sharded.push_back(plan.tp_sharded[i]);
    dims.push_back(plan.tp_shard_dims[i]);
    replicas.push_back(plan.tp_shard_replicas[i]);
  }
  plan.tp_partial_grads = partial, plan.tp_sharded = sharded;
  plan.tp_shard_dims = dims, plan.tp_shard_replicas = replicas;
  if (!schedule_.split_backward()) return;
  // Zero-bubble: the same product y = x W^T, with a backward whose weight half waits for W.
  auto defer = [this](Linear& l) {
    LinearImpl* raw = l.get();
    WeightGradStore* store = &store_;
    ForwardFn product = [raw, store](const torch::Tensor& x) { return deferred_linear(x, raw->weight, store); };
    WrapFn outer = raw->wrap;  // a TP wrap keeps its collectives around the product
    raw->wrap = [outer, product](const torch::Tensor& x, const ForwardFn&) {
      return outer ? outer(x, product) : product(x);
    };
  };
  for (int64_t i = 0; i < static_cast<int64_t>(model->layers.size()); ++i) {
    if (!holds_layer(i)) continue;
    auto& attn = model->layers[i]->attention;
    auto& ff = model->layers[i]->feed_forward;  // null in an MoE block (its experts' weight gradients are not deferred)
    Linear none{nullptr};
    for (Linear* l : {&attn->wq, &attn->wk, &attn->wv, &attn->wo, ff ? &ff->w1 : &none, ff ? &ff->w2 : &none, ff ? &ff->w3 : &none})
      if (*l) defer(*l);  // w3: SwiGLU only
  }
  if (model->output && holds("output.weight")) defer(model->output);
}

std::vector<std::vector<NamedModule>> PipelineModel::block_modules(Transformer& model) const {
  auto all = titan::block_modules(model);
  std::vector<std::vector<NamedModule>> out;
  for (size_t i = 0; i < all.size(); ++i)
    if (holds_layer(static_cast<int64_t>(i))) out.push_back(all[i]);
  return out;
}

BlockWrapFn PipelineModel::local_block_wrapper(BlockWrapFn by_local_index) const {
  std::vector<int64_t> local(static_cast<size_t>(stages_.back().end), -1);
  int64_t next = 0;
  for (size_t i = 0; i < local.size(); ++i)
    if (holds_layer(static_cast<int64_t>(i))) local[i] = next++;
  return [local, inner = std::move(by_local_index)](int64_t layer, const torch::Tensor& x, const ForwardFn& fn) {
    return inner(local[layer], x, fn);
  };
}

torch::Tensor PipelineModel::run(Transformer& model, const torch::Tensor& inputs, const torch::Tensor& labels,
                                 const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>& loss_fn,
                                 const WrapFn& root_wrap, const std::function<void()>& reduce_grad) {
  const int64_t mbs = microbatch_size_;
  TITAN_CHECK(inputs.size(0) == mbs * microbatches(), "pipeline: a batch of ", inputs.size(0), " rows for ",
              microbatches(), " micro-batches of ", mbs);
  size_t reduced = 0;
  PipelineStageFns fns;
  fns.first_input = [&](int k) { return inputs.narrow(0, k * mbs, mbs); };
  fns.activation_buffer = [&](int) { return torch::empty({mbs, seq_local_, dim_}, activation_options_); };
  fns.forward = [&](int s, int k, const torch::Tensor& in) {
    const StageLayers& st = stages_[s];
    ForwardFn body = [&](const torch::Tensor& x) {
      torch::Tensor h = st.embedding ? model->tok_embeddings(x) : x;
      h = model->run_layers(h, st.begin, st.end);
      return st.output ? model->head(model->norm(h)) : h;
    };
    // FSDP's tied head unit holds the embedding too: a rank running the first and the last
    // stage (V schedules) gathers it around both.
    const bool root = st.output || (st.embedding && root_wraps_embedding);
    torch::Tensor out = root_wrap && root ? root_wrap(in, body) : body(in);
    return st.output ? loss_fn(out, labels.narrow(0, k * mbs, mbs)) : out;
  };
  fns.reduce_grad = [&](int) {
    if (++reduced == local_stages_.size() && reduce_grad) reduce_grad();
  };
  fns.observer = observer;
  torch::Tensor loss = runtime_->run(fns);
  if (reduced < local_stages_.size() && reduce_grad) reduce_grad();  // a CSV without REDUCE_GRAD
  return loss;
}

}  // namespace titan
