#include "trainer/checkpoint/training_state.h"

#include <ATen/CPUGeneratorImpl.h>

#include "common/error.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/moe_buffers.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace {

int64_t scalar(const CheckpointMeta& m, const std::string& name) {
  auto it = m.state.find(name);
  TITAN_CHECK(it != m.state.end(), "checkpoint: has no ", name);
  return it->second;
}

std::function<void()> copy_into(const std::vector<torch::Tensor>& live, std::vector<torch::Tensor> staged) {
  return [live, staged] {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < staged.size(); ++i) live[i].view({-1}).copy_(staged[i]);
  };
}

// The trainer's step count: the LR schedule is a function of it, and so is "train state".
StatefulPart step_part(Trainer& t, const std::string& name) {
  StatefulPart p{name};
  p.save = [&t](SaveSink& s) { s.meta.state["lr_scheduler_step"] = t.step(); };
  p.stage = [&t](LoadSource& in) -> std::function<void()> {
    const int64_t step = scalar(in.meta, "lr_scheduler_step");
    return [&t, step] { t.set_step(step); };
  };
  return p;
}

}  // namespace

std::vector<StatefulPart> training_state(Trainer& t) {
  std::vector<StatefulPart> parts;
  auto params = [&t] {
    std::vector<torch::Tensor> v;
    for (auto& p : t.optimizer().params()) v.push_back(p.param);
    return v;
  };
  auto moments = [&t](bool second) {
    std::vector<torch::Tensor> v;
    for (auto& s : t.optimizer().states()) v.push_back(second ? s.exp_avg_sq : s.exp_avg);
    return v;
  };

  StatefulPart model{"model", /*model_only=*/true};
  model.save = [&t, params](SaveSink& s) {
    s.tensors("model", params(), /*exportable=*/true);
    save_moe_buffers(t, s);
  };
  model.stage = [&t, params](LoadSource& in) -> std::function<void()> {
    auto weights = copy_into(params(), in.tensors("model", params()));
    auto buffers = stage_moe_buffers(t, in);
    return [weights, buffers] {
      weights();
      buffers();
    };
  };
  parts.push_back(model);

  StatefulPart optim{"optimizer"};
  optim.save = [&t, moments](SaveSink& s) {
    s.tensors("optimizer/exp_avg", moments(false), false);
    s.tensors("optimizer/exp_avg_sq", moments(true), false);
    s.meta.state["optimizer_step"] = t.optimizer().step_count();
  };
  optim.stage = [&t, moments](LoadSource& in) -> std::function<void()> {
    auto m1 = copy_into(moments(false), in.tensors("optimizer/exp_avg", moments(false)));
    auto m2 = copy_into(moments(true), in.tensors("optimizer/exp_avg_sq", moments(true)));
    const int64_t count = scalar(in.meta, "optimizer_step");
    return [&t, m1, m2, count] {
      m1();
      m2();
      t.optimizer().set_step_count(count);
    };
  };
  parts.push_back(optim);

  parts.push_back(step_part(t, "lr_scheduler"));

  StatefulPart data{"dataloader"};
  data.save = [&t](SaveSink& s) { s.meta.state["data_consumed_sequences"] = t.loader().consumed_sequences(); };
  data.stage = [&t](LoadSource& in) -> std::function<void()> {
    const int64_t consumed = scalar(in.meta, "data_consumed_sequences");
    return [&t, consumed] { t.loader().set_consumed_sequences(consumed); };
  };
  parts.push_back(data);

  StatefulPart rng{"rng"};
  rng.save = [](SaveSink& s) { *s.rng = at::detail::getDefaultCPUGenerator().get_state().clone(); };
  rng.stage = [](LoadSource& in) -> std::function<void()> {
    torch::Tensor state = in.rng();
    return [state] {
      if (!state.defined() || state.numel() == 0) return;
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    };
  };
  parts.push_back(rng);

  parts.push_back(step_part(t, "train_state"));
  return parts;
}

}  // namespace titan
