#include "parallel/fsdp.h"

#include <algorithm>

#include <torch/csrc/autograd/engine.h>

#include "common/error.h"
#include "parallel/fsdp_unit.h"

namespace titan {

namespace {
FsdpObserver* observer = nullptr;
}  // namespace

void set_fsdp_observer(FsdpObserver* o) { observer = o; }
FsdpObserver* fsdp_observer() { return observer; }

void note_shard_collective(const Fsdp* fsdp, const std::string& op, const Communicator& group,
                           const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& tensors) {
  if (!observer || !fsdp || group.size() <= 1 || params.empty()) return;
  std::vector<int64_t> numels;
  std::vector<at::ScalarType> dtypes;
  for (size_t i = 0; i < params.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : fsdp->shard_of(params[i]).full_shape) n *= d;
    numels.push_back(n);
    dtypes.push_back(tensors[i].scalar_type());
  }
  observer->collective(op, group.name(), numels, dtypes, /*padded=*/false);
}

Fsdp::Fsdp(std::shared_ptr<Communicator> shard_group, std::shared_ptr<Communicator> replicate_group,
           const FsdpOptions& options, std::vector<NamedModule> embedding,
           std::vector<std::vector<NamedModule>> blocks, std::vector<NamedModule> head, bool tied)
    : shard_group_(std::move(shard_group)), replicate_group_(std::move(replicate_group)), options_(options) {
  // The head's backward comes first, so by default it keeps its gathered parameters; so
  // does a tied head, which the embedding lookup at the start of forward needs too.
  const FsdpOptions::Reshard r = options_.reshard_after_forward;
  const bool head_reshard = r == FsdpOptions::Reshard::kAlways;
  const bool other_reshard = r != FsdpOptions::Reshard::kNever;
  tied_ = tied;
  TITAN_CHECK(!tied_ || embedding.empty(), "fsdp: tied weights list the embedding in the head unit only");
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
  if (FsdpObserver* o = fsdp_observer()) {
    std::vector<int64_t> numels;
    for (auto& u : units_)
      for (int64_t n : u->numels()) numels.push_back(n);
    o->plan(shard_group_->size(), numels);
  }
  for (auto& u : units_) wire(*u);
}

void Fsdp::wire(FsdpUnit& unit) {
  FsdpUnit* u = &unit;
  u->sync_ = &sync_;
  u->reshard_after_backward_ = &reshard_after_backward_;
  u->before_reduce = [this](FsdpUnit* next) {
    if (last_reducing_ && last_reducing_ != next) last_reducing_->note_reduce_inputs_done();
    last_reducing_ = next;
  };
  u->on_grad = [this] {
    if (finish_queued_) return;
    finish_queued_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
  };
  // HSDP / DDP in fused mode: once a block's reduce-scatter is issued, the replica
  // all-reduce of blocks whose reduce-scatter went out earlier starts, so it overlaps the
  // rest of backward instead of waiting for finish_backward().
  if (replicate_group_->size() > 1 && fused()) {
    u->on_reduce_issued = [this](FsdpUnit* issued) {
      for (FsdpUnit* other : all_units()) {
        if (other != issued && other->reducing() && !other->replicating()) {
          other->start_replicate_reduce();
        }
      }
    };
  }
}

std::vector<FsdpUnit*> Fsdp::all_units() const {
  std::vector<FsdpUnit*> out;
  for (auto& u : units_) out.push_back(u.get());
  for (auto& u : expert_units_) out.push_back(u.get());
  return out;
}

void Fsdp::add_expert_units(std::shared_ptr<Communicator> expert_shard_group,
                            std::vector<std::vector<NamedModule>> expert_blocks) {
  TITAN_CHECK(expert_units_.empty(), "fsdp: expert units added twice");
  const size_t blocks = units_.size() - (tied_ ? 1 : 2);
  TITAN_CHECK(expert_blocks.size() == blocks, "fsdp: ", expert_blocks.size(), " expert unit lists for ", blocks,
              " blocks");
  expert_group_ = std::move(expert_shard_group);
  const bool reshard = options_.reshard_after_forward != FsdpOptions::Reshard::kNever;
  for (size_t i = 0; i < blocks; ++i) {
    expert_units_.push_back(std::make_unique<FsdpUnit>("layers." + std::to_string(i) + ".experts",
                                                       std::move(expert_blocks[i]), *expert_group_,
                                                       *replicate_group_, options_, reshard));
    expert_units_.back()->always_reduce = true;
    wire(*expert_units_.back());
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
      out = pre_backward(out, &head, nullptr);
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
    FsdpUnit* experts = expert_units_.empty() ? nullptr : expert_units_[layer].get();
    unit.install();
    if (experts) experts->install();
    const bool has_next = static_cast<size_t>(layer + 2) < units_.size();
    if (fused() && has_next) units_[2 + layer]->issue_gather();
    if (fused() && experts && static_cast<size_t>(layer + 1) < expert_units_.size())
      expert_units_[layer + 1]->issue_gather();
    auto out = inner(x);
    if (!unit.reshard_after_forward()) return out;
    unit.reshard();
    if (experts) experts->reshard();
    // In backward, block `layer - 1` comes next.
    // The root needs no prefetch: its own pre-backward ran first, at the logits.
    FsdpUnit* prev = layer > 0 && fused() ? units_[layer].get() : nullptr;
    if (experts) {
      FsdpUnit* prev_experts = layer > 0 && fused() ? expert_units_[layer - 1].get() : nullptr;
      out = pre_backward(out, experts, prev_experts);
    }
    return pre_backward(out, &unit, prev);
  };
}

void Fsdp::finish_backward() {
  finish_queued_ = false;
  last_reducing_ = nullptr;
  // Units whose gradients arrived only in part (unused parameters) reduce what they have.
  const std::vector<FsdpUnit*> units = all_units();
  for (FsdpUnit* u : units) {
    if (!u->reducing()) u->issue_reduce();
  }
  for (FsdpUnit* u : units) u->complete_reduce();
  // Kept gathered, a pipeline step's later backward calls still read them (reshard_all ends it).
  if (reshard_after_backward_) reshard_all();
}

void Fsdp::reshard_all() {
  for (FsdpUnit* u : all_units()) u->reshard();
}

FsdpShard Fsdp::shard_of(const torch::Tensor& param) const {
  for (FsdpUnit* u : all_units()) {
    const int64_t rank = u->shard_group().rank();
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

Communicator& Fsdp::shard_group_of(const torch::Tensor& param) const {
  for (FsdpUnit* u : all_units())
    for (auto& p : u->params())
      if (p.shard.is_same(param)) return u->shard_group();
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
