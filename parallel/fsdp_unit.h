// One FSDP unit: the sharded parameters of a group of modules, their all-gather before
// forward (and again before backward), and the reduce-scatter of their gradients. Internal to
// parallel/fsdp.cpp, which composes units into the model's FSDP plan.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "collectives/communicator.h"
#include "common/error.h"
#include "parallel/fsdp.h"
#include "parallel/fsdp_observer.h"
#include "parallel/storage_listener.h"

namespace titan {

// Frees a buffer's memory while keeping its TensorImpl (and every view of it that autograd
// saved) intact; refill_storage gives it memory again before the views are read.
// Meta tensors (simulated runs) have no memory to free or refill: the storage listener is
// told instead (parallel/storage_listener.h).
void free_storage(const torch::Tensor& t);
void refill_storage(const torch::Tensor& t);

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
  Communicator& shard_group() const { return shard_group_; }
  std::vector<ShardedParam>& params() { return params_; }

  // Issues the all-gather of every shard (one coalesced async op in fused mode).
  void issue_gather() {
    // empty: a pipeline rank without this unit's modules
    if (gather_work_ || holds_gathered() || params_.empty()) return;
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
    if (FsdpObserver* o = fsdp_observer()) {
      for (auto& p : params_) o->shard_sized(p.gathered_flat, p.numel);
      o->collective("all_gather", shard_group_.name(), numels(),
                    std::vector<at::ScalarType>(params_.size(), opts_.param_dtype), true);
    }
    gather_work_ = shard_group_.all_gather(outs, ins);
  }

  void wait_gather() {
    if (params_.empty() || holds_gathered()) return;
    if (!gather_work_) issue_gather();
    gather_work_->wait();
    gather_work_.reset();
    gathered_ = true;
  }

  // While the plan keeps parameters gathered across backward calls (a pipeline step, whose
  // shards do not change until the optimizer runs after it), later micro-batches reuse the
  // gathered buffers instead of gathering them again.
  bool holds_gathered() const { return gathered_ && reshard_after_backward_ && !*reshard_after_backward_; }

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
    gathered_ = false;
  }
  bool reshard_after_forward() const { return reshard_after_forward_; }

  // Called by UnshardFunction::backward with the gradient of parameter i; once every
  // parameter of the unit has one, its gathered buffers are freed unless the plan keeps them
  // to the end of backward (Fsdp::set_reshard_after_backward: no backward op reads them any
  // more, and kept, every block's are live at once late in backward) and the unit's
  // reduction is issued.
  void add_grad(size_t i, const torch::Tensor& grad) {
    if (on_grad) on_grad();
    if (pending_grads_.empty()) pending_grads_.resize(params_.size());
    auto& p = params_[i];
    if (!*sync_ && i < unsynced_.size() && unsynced_[i].defined()) {
      // A later micro-batch with sync off adds into the running sum: the values a zeroed
      // buffer, a copy and an add would give, without the buffer's traffic.
      unsynced_[i].narrow(0, 0, p.numel).add_(grad.reshape({-1}).to(opts_.reduce_dtype));
    } else {
      auto flat = torch::zeros({p.shard_len * shard_group_.size()}, grad.options().dtype(opts_.reduce_dtype));
      if (FsdpObserver* o = fsdp_observer()) o->shard_sized(flat, p.numel);
      flat.narrow(0, 0, p.numel).copy_(grad.reshape({-1}));
      pending_grads_[i] = flat;
    }
    if (++grads_seen_ < params_.size()) return;
    if (!reshard_after_backward_ || *reshard_after_backward_) reshard();
    if (issue_reduce() && on_reduce_issued) on_reduce_issued(this);
  }

  // Reduce-scatter over the shard group (the replicate all-reduce follows in complete()),
  // or, while gradient sync is off, adds the gradients to the unsynced sums instead.
  // Returns whether a reduction was issued.
  bool issue_reduce() {
    if (grads_seen_ == 0 && unsynced_.empty() && !(always_reduce && *sync_)) return false;
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
      if (!pending_grads_[i].defined()) {
        if (!always_reduce) continue;
        pending_grads_[i] = torch::zeros({params_[i].shard_len * shard_group_.size()},
                                         params_[i].shard.options().dtype(opts_.reduce_dtype));
      }
      ins.push_back(pending_grads_[i]);
      outs.push_back(torch::empty({params_[i].shard_len}, pending_grads_[i].options()));
      reduce_index_.push_back(i);
    }
    reduce_outs_ = outs;
    if (FsdpObserver* o = fsdp_observer()) {
      for (size_t k = 0; k < reduce_index_.size(); ++k) o->shard_sized(outs[k], params_[reduce_index_[k]].numel);
      note_reduction(*o, "reduce_scatter", shard_group_, ins, true);
    }
    if (before_reduce) before_reduce(this);
    reduce_work_ = shard_group_.reduce_scatter(outs, ins, ReduceOp::kSum);
    // Kept on meta only, for the memory walk's notes; a real collective holds its own inputs.
    if (!ins.empty() && ins.front().is_meta()) reduce_ins_ = std::move(ins);
    pending_grads_.clear();
    grads_seen_ = 0;
    return true;
  }

  // After the reduce-scatter: all-reduce across replicas (HSDP / DDP), then accumulate.
  void start_replicate_reduce() {
    if (!reduce_work_ || replicate_work_) return;
    reduce_work_->wait();
    for (const auto& t : reduce_ins_) release_storage(t);
    reduce_ins_.clear();
    if (replicate_group_.size() <= 1) return;
    if (FsdpObserver* o = fsdp_observer()) note_reduction(*o, "all_reduce", replicate_group_, reduce_outs_, false);
    replicate_work_ = replicate_group_.all_reduce(reduce_outs_, ReduceOp::kSum);
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

  // The full element count of every parameter, in order.
  std::vector<int64_t> numels() const {
    std::vector<int64_t> n;
    for (const auto& p : params_) n.push_back(p.numel);
    return n;
  }

  bool reducing() const { return reduce_work_ != nullptr; }
  bool replicating() const { return replicate_work_ != nullptr; }

  // Set by Fsdp: called when this unit's reduce-scatter is issued during backward, and
  // when a gradient arrives (so that the end of backward is hooked); sync_ is Fsdp's flag.
  std::function<void(FsdpUnit*)> on_reduce_issued;
  // Reduce every parameter at the end of each synced backward, zeros where no gradient came:
  // expert units, whose rank may route no token to its experts in a step while its efsdp peers
  // do (their reduce-scatters must meet), and whose weights then take a zero gradient, as
  // the stacked experts' unused rows do in one process.
  bool always_reduce = false;
  std::function<void()> on_grad;
  // Set by Fsdp: called before this unit's reduce-scatter is issued.
  std::function<void(FsdpUnit*)> before_reduce;
  // On meta: the reduce-scatter inputs count as freed now. This trainer holds them until the
  // reduction is waited on; on an accelerator a reduce-scatter is done by the time the next
  // block's is issued (FSDP2 frees the previous one's input there), which is what the memory
  // walk should see. No effect on real tensors.
  void note_reduce_inputs_done() {
    for (const auto& t : reduce_ins_) release_storage(t);
  }
  const bool* sync_ = nullptr;
  const bool* reshard_after_backward_ = nullptr;  // Fsdp's flag

 private:
  // Tells the observer of a reduction over the parameters in reduce_index_ (tensors: one each).
  void note_reduction(FsdpObserver& o, const char* op, const Communicator& group,
                      const std::vector<torch::Tensor>& tensors, bool padded) const {
    std::vector<int64_t> n;
    std::vector<at::ScalarType> dtypes;
    for (size_t k = 0; k < reduce_index_.size(); ++k) {
      n.push_back(params_[reduce_index_[k]].numel);
      dtypes.push_back(tensors[k].scalar_type());
    }
    o.collective(op, group.name(), n, dtypes, padded);
  }

  std::string name_;
  Communicator& shard_group_;
  Communicator& replicate_group_;
  FsdpOptions opts_;
  bool reshard_after_forward_;
  std::vector<ShardedParam> params_;
  WorkPtr gather_work_;
  bool gathered_ = false;  // the buffers hold the shards' current values
  std::vector<torch::Tensor> pending_grads_;
  std::vector<torch::Tensor> unsynced_;  // full gradients summed while sync is off
  size_t grads_seen_ = 0;
  std::vector<size_t> reduce_index_;
  std::vector<torch::Tensor> reduce_ins_, reduce_outs_;
  WorkPtr reduce_work_, replicate_work_;
};

// Identity on x whose backward gathers `unit`'s parameters again (they were freed after
// forward) before autograd reaches the unit's own backward, and in fused mode issues the
// gather of `prev`, the unit backward reaches next (may be null).
torch::Tensor pre_backward(const torch::Tensor& x, FsdpUnit* unit, FsdpUnit* prev);

}  // namespace titan
