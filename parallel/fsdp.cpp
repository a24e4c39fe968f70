#include "parallel/fsdp.h"

#include <algorithm>

#include <c10/core/CPUAllocator.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>

#include "common/error.h"

namespace titan {

namespace {

// Frees a buffer's memory while keeping its TensorImpl (and every view of it that autograd
// saved) intact; refill_storage gives it memory again before the views are read.
// Meta tensors (simulated runs) have no memory to free or refill.
void free_storage(const torch::Tensor& t) {
  if (t.is_meta()) return;
  auto* impl = t.storage().unsafeGetStorageImpl();
  if (impl->nbytes() == 0) return;
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  impl->set_nbytes(0);
}

void refill_storage(const torch::Tensor& t) {
  if (t.is_meta()) return;
  auto* impl = t.storage().unsafeGetStorageImpl();
  const size_t bytes = t.numel() * t.element_size();
  if (impl->nbytes() == bytes) return;
  impl->set_data_ptr_noswap(c10::GetCPUAllocator()->allocate(bytes));
  impl->set_nbytes(bytes);
}

}  // namespace

// One sharded parameter of a unit.
struct ShardedParam {
  std::string name;
  std::shared_ptr<WeightModule> module;
  torch::Tensor shard;  // the registered parameter, now [shard_len]
  std::vector<int64_t> full_shape;
  int64_t numel = 0, shard_len = 0;
  torch::Tensor gathered_flat;  // [shard_len * group], param dtype; storage freed when resharded
};

class FsdpUnit {
 public:
  FsdpUnit(std::string name, std::vector<NamedModule> modules,
           Communicator& shard_group, Communicator& replicate_group, const FsdpOptions& opts,
           bool reshard_after_forward)
      : name_(std::move(name)),
        shard_group_(shard_group),
        replicate_group_(replicate_group),
        opts_(opts),
        reshard_after_forward_(reshard_after_forward) {
    const int64_t world = shard_group.size(), rank = shard_group.rank();
    torch::NoGradGuard no_grad;
    for (auto& m : modules) {
      ShardedParam p;
      p.name = m.name + ".weight";
      p.module = m.module;
      torch::Tensor full = m.module->weight;  // the registered parameter (same TensorImpl)
      TITAN_CHECK(full.defined() && full.requires_grad(), "fsdp: ", p.name,
                  " is not a trainable parameter");
      p.full_shape = full.sizes().vec();
      p.numel = full.numel();
      p.shard_len = (p.numel + world - 1) / world;
      auto padded = torch::zeros({p.shard_len * world}, full.options());
      padded.narrow(0, 0, p.numel).copy_(full.detach().reshape({-1}));
      // set_data keeps the parameter object (registered in the module, seen by the
      // optimizer) and makes it the shard; padding of the last shard stays zero.
      full.set_data(padded.narrow(0, rank * p.shard_len, p.shard_len).clone());
      p.shard = full;
      params_.push_back(std::move(p));
    }
  }

  const std::string& name() const { return name_; }
  std::vector<ShardedParam>& params() { return params_; }

  // Issues the all-gather of every shard (one coalesced async op in fused mode).
  void issue_gather() {
    if (gather_work_) return;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> outs, ins;
    for (auto& p : params_) {
      if (!p.gathered_flat.defined()) {
        p.gathered_flat =
            torch::empty({p.shard_len * shard_group_.size()}, p.shard.options().dtype(opts_.param_dtype));
      }
      refill_storage(p.gathered_flat);
      outs.push_back(p.gathered_flat);
      ins.push_back(p.shard.detach().to(opts_.param_dtype));
    }
    gather_work_ = shard_group_.all_gather(outs, ins);
  }

  void wait_gather() {
    if (!gather_work_) issue_gather();
    gather_work_->wait();
    gather_work_.reset();
  }

  // Before forward: gathered parameters become the modules' weights, linked to the shards
  // through UnshardFunction so that their gradients come back here.
  void install();

  void reshard() {
    if (gather_work_) {  // never free a buffer a gather is still writing
      gather_work_->wait();
      gather_work_.reset();
    }
    for (auto& p : params_) {
      if (p.gathered_flat.defined()) free_storage(p.gathered_flat);
    }
  }
  bool reshard_after_forward() const { return reshard_after_forward_; }

  // Called by UnshardFunction::backward with the gradient of parameter i; once every
  // parameter of the unit has one, the unit's reduction is issued.
  void add_grad(size_t i, const torch::Tensor& grad) {
    if (on_grad) on_grad();
    if (pending_grads_.empty()) pending_grads_.resize(params_.size());
    auto& p = params_[i];
    auto flat = torch::zeros({p.shard_len * shard_group_.size()}, grad.options().dtype(opts_.reduce_dtype));
    flat.narrow(0, 0, p.numel).copy_(grad.reshape({-1}));
    pending_grads_[i] = flat;
    if (++grads_seen_ == params_.size() && issue_reduce() && on_reduce_issued) on_reduce_issued(this);
  }

  // Reduce-scatter over the shard group (the replicate all-reduce follows in complete()),
  // or, while gradient sync is off, adds the gradients to the unsynced sums instead.
  // Returns whether a reduction was issued.
  bool issue_reduce() {
    if (grads_seen_ == 0 && unsynced_.empty()) return false;
    pending_grads_.resize(params_.size());
    if (!*sync_) {
      unsynced_.resize(params_.size());
      for (size_t i = 0; i < params_.size(); ++i) {
        auto& g = pending_grads_[i];
        if (!g.defined()) continue;
        unsynced_[i] = unsynced_[i].defined() ? unsynced_[i].add_(g) : g;
      }
      pending_grads_.clear();
      grads_seen_ = 0;
      return false;
    }
    for (size_t i = 0; i < unsynced_.size(); ++i) {  // earlier micro-batches first, as accumulated
      auto& g = pending_grads_[i];
      if (unsynced_[i].defined()) g = g.defined() ? unsynced_[i].add_(g) : unsynced_[i];
    }
    unsynced_.clear();
    std::vector<torch::Tensor> outs, ins;
    reduce_index_.clear();
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!pending_grads_[i].defined()) continue;
      ins.push_back(pending_grads_[i]);
      outs.push_back(torch::empty({params_[i].shard_len}, pending_grads_[i].options()));
      reduce_index_.push_back(i);
    }
    reduce_outs_ = outs;
    reduce_work_ = shard_group_.reduce_scatter(outs, ins, ReduceOp::kSum);
    pending_grads_.clear();
    grads_seen_ = 0;
    return true;
  }

  // After the reduce-scatter: all-reduce across replicas (HSDP / DDP), then accumulate.
  void start_replicate_reduce() {
    if (!reduce_work_ || replicate_work_) return;
    reduce_work_->wait();
    if (replicate_group_.size() > 1) replicate_work_ = replicate_group_.all_reduce(reduce_outs_, ReduceOp::kSum);
  }

  void complete_reduce() {
    if (!reduce_work_) return;
    start_replicate_reduce();
    if (replicate_work_) replicate_work_->wait();
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < reduce_index_.size(); ++k) {
      auto& shard = params_[reduce_index_[k]].shard;
      auto g = reduce_outs_[k].to(shard.scalar_type());
      if (shard.grad().defined()) {
        shard.mutable_grad().add_(g);
      } else {
        shard.mutable_grad() = g;
      }
    }
    reduce_work_.reset();
    replicate_work_.reset();
    reduce_outs_.clear();
  }

  bool reducing() const { return reduce_work_ != nullptr; }
  bool replicating() const { return replicate_work_ != nullptr; }

  // Set by Fsdp: called when this unit's reduce-scatter is issued during backward, and
  // when a gradient arrives (so that the end of backward is hooked); sync_ is Fsdp's flag.
  std::function<void(FsdpUnit*)> on_reduce_issued;
  std::function<void()> on_grad;
  const bool* sync_ = nullptr;

 private:
  std::string name_;
  Communicator& shard_group_;
  Communicator& replicate_group_;
  FsdpOptions opts_;
  bool reshard_after_forward_;
  std::vector<ShardedParam> params_;
  WorkPtr gather_work_;
  std::vector<torch::Tensor> pending_grads_;
  std::vector<torch::Tensor> unsynced_;  // full gradients summed while sync is off
  size_t grads_seen_ = 0;
  std::vector<size_t> reduce_index_;
  std::vector<torch::Tensor> reduce_outs_;
  WorkPtr reduce_work_, replicate_work_;
};

namespace {

// shard -> gathered full parameter; backward hands the full gradient to the unit, which
// reduce-scatters it (the shard's gradient arrives through finish_backward, not autograd).
struct UnshardFunction : public torch::autograd::Function<UnshardFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor shard,
                               torch::Tensor gathered, int64_t unit_ptr, int64_t index) {
    ctx->saved_data["unit"] = unit_ptr;
    ctx->saved_data["index"] = index;
    return gathered;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* unit = reinterpret_cast<FsdpUnit*>(ctx->saved_data["unit"].toInt());
    unit->add_grad(static_cast<size_t>(ctx->saved_data["index"].toInt()), grads[0]);
    return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Identity on a block's output whose backward gathers the block's parameters again (they
// were freed after forward) before autograd reaches the block's own backward.
struct PreBackwardFunction : public torch::autograd::Function<PreBackwardFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               int64_t unit_ptr, int64_t prev_ptr) {
    ctx->saved_data["unit"] = unit_ptr;
    ctx->saved_data["prev"] = prev_ptr;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* unit = reinterpret_cast<FsdpUnit*>(ctx->saved_data["unit"].toInt());
    auto* prev = reinterpret_cast<FsdpUnit*>(ctx->saved_data["prev"].toInt());
    unit->wait_gather();
    // Fused mode: the next unit backward reaches (the previous block) is gathered meanwhile.
    if (prev) prev->issue_gather();
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void FsdpUnit::install() {
  wait_gather();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    // An alias of the buffer's storage with its own version counter: the gathers that
    // refill the buffer for backward must not look like in-place edits of saved tensors.
    auto gathered = torch::empty({0}, p.gathered_flat.options());
    gathered.set_(p.gathered_flat.storage(), 0, p.full_shape, c10::contiguous_strides(p.full_shape));
    p.module->weight = UnshardFunction::apply(p.shard, gathered,
                                              reinterpret_cast<int64_t>(this), static_cast<int64_t>(i));
  }
}

Fsdp::Fsdp(std::shared_ptr<Communicator> shard_group, std::shared_ptr<Communicator> replicate_group,
           const FsdpOptions& options, std::vector<NamedModule> embedding,
           std::vector<std::vector<NamedModule>> blocks, std::vector<NamedModule> head)
    : shard_group_(std::move(shard_group)), replicate_group_(std::move(replicate_group)), options_(options) {
  // The head's backward comes first, so by default it keeps its gathered parameters; so
  // does a tied head, which the embedding lookup at the start of forward needs too.
  const FsdpOptions::Reshard r = options_.reshard_after_forward;
  const bool head_reshard = r == FsdpOptions::Reshard::kAlways;
  const bool other_reshard = r != FsdpOptions::Reshard::kNever;
  tied_ = embedding.empty();
  auto add = [&](const std::string& name, std::vector<NamedModule> modules, bool reshard) {
    units_.push_back(std::make_unique<FsdpUnit>(name, std::move(modules), *shard_group_, *replicate_group_,
                                                options_, reshard));
  };
  if (tied_) {
    add("head", std::move(head), head_reshard);
  } else {
    add("tok_embeddings", std::move(embedding), other_reshard);
  }
  for (size_t i = 0; i < blocks.size(); ++i) add("layers." + std::to_string(i), std::move(blocks[i]), other_reshard);
  if (!tied_) add("head", std::move(head), head_reshard);
  for (auto& u : units_) {
    u->sync_ = &sync_;
    u->on_grad = [this] {
      if (finish_queued_) return;
      finish_queued_ = true;
      torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
    };
  }
  // HSDP / DDP in fused mode: once a block's reduce-scatter is issued, the replica
  // all-reduce of blocks whose reduce-scatter went out earlier starts, so it overlaps the
  // rest of backward instead of waiting for finish_backward().
  if (replicate_group_->size() > 1 && fused()) {
    for (auto& u : units_) {
      u->on_reduce_issued = [this](FsdpUnit* issued) {
        for (auto& other : units_) {
          if (other.get() != issued && other->reducing() && !other->replicating()) {
            other->start_replicate_reduce();
          }
        }
      };
    }
  }
}

Fsdp::~Fsdp() = default;

bool Fsdp::fused() const { return is_fused(shard_group_->options()); }

WrapFn Fsdp::root_wrapper() {
  return [this](const torch::Tensor& tokens, const ForwardFn& inner) {
    if (tied_) {
      units_[0]->install();
      if (fused() && units_.size() > 1) units_[1]->issue_gather();
    }
    auto out = inner(tokens);
    FsdpUnit& head = head_unit();
    if (head.reshard_after_forward()) {
      head.reshard();
      out = PreBackwardFunction::apply(out, reinterpret_cast<int64_t>(&head), 0);
    }
    return out;
  };
}

WrapFn Fsdp::embedding_wrapper() {
  return [this](const torch::Tensor& ids, const ForwardFn& inner) {
    FsdpUnit& embedding = *units_[0];
    embedding.install();
    if (fused() && units_.size() > 1) units_[1]->issue_gather();
    auto out = inner(ids);
    // A row lookup's gradient is a scatter into zeros: backward never reads the weight, so
    // the gathered table can go now and is not gathered again.
    if (embedding.reshard_after_forward()) embedding.reshard();
    return out;
  };
}

WrapFn Fsdp::head_wrapper() {
  return [this](const torch::Tensor& x, const ForwardFn& inner) {
    units_.back()->install();  // prefetched by the last block in fused mode
    return inner(x);
  };
}

BlockWrapFn Fsdp::block_wrapper() {
  return [this](int64_t layer, const torch::Tensor& x, const ForwardFn& inner) {
    FsdpUnit& unit = *units_[1 + layer];
    unit.install();
    const bool has_next = static_cast<size_t>(layer + 2) < units_.size();
    if (fused() && has_next) units_[2 + layer]->issue_gather();
    auto out = inner(x);
    if (!unit.reshard_after_forward()) return out;
    unit.reshard();
    // In backward, block `layer - 1` comes next.
    // The root needs no prefetch: its own pre-backward ran first, at the logits.
    FsdpUnit* prev = layer > 0 && fused() ? units_[layer].get() : nullptr;
    return PreBackwardFunction::apply(out, reinterpret_cast<int64_t>(&unit), reinterpret_cast<int64_t>(prev));
  };
}

void Fsdp::finish_backward() {
  finish_queued_ = false;
  // Units whose gradients arrived only in part (unused parameters) reduce what they have.
  for (auto& u : units_) {
    if (!u->reducing()) u->issue_reduce();
  }
  for (auto& u : units_) u->complete_reduce();
  for (auto& u : units_) u->reshard();
}

FsdpShard Fsdp::shard_of(const torch::Tensor& param) const {
  const int64_t rank = shard_group_->rank();
  for (auto& u : units_) {
    for (auto& p : u->params()) {
      if (!p.shard.is_same(param)) continue;
      FsdpShard s;
      s.full_shape = p.full_shape;
      s.shard_len = p.shard_len;
      s.offset = rank * p.shard_len;
      s.length = std::clamp<int64_t>(p.numel - s.offset, 0, p.shard_len);
      return s;
    }
  }
  TITAN_FAIL("fsdp: the tensor asked for is not a parameter sharded by this plan");
}

torch::Tensor gather_full_parameter(Communicator& group, const torch::Tensor& shard,
                                    at::IntArrayRef full_shape) {
  int64_t numel = 1;
  for (auto s : full_shape) numel *= s;
  auto flat = torch::empty({shard.numel() * group.size()}, shard.options());
  group.all_gather(flat, shard.detach().contiguous())->wait();
  return flat.narrow(0, 0, numel).view(full_shape).clone();
}

}  // namespace titan
