// The fused kernels in a meta-device recording (trainer/simulate/trace_recorder.h with
// RecordOptions::fused_kernels): each kernel a real CPU run takes is one op descriptor with
// the kernel's shapes, FLOPs and bytes (devices/fused_ops.h), forward and backward; with the
// model's switch off (training.fused_kernels = false), or a dtype the kernels do not take, or
// a recorder that does not keep them (accelerators), the composite ATen ops are recorded.
#include <gtest/gtest.h>

#include "devices/fused_ops.h"
#include "devices/trace_memory.h"
#include "trainer/components/optimizer.h"
#include "trainer/model/model.h"
#include "trainer/simulate/trace_recorder.h"
#include "tests/trainer/tiny_model_args.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

const auto kMeta = torch::TensorOptions().device(torch::kMeta);

std::vector<devices::OpDesc> ops_of(const TraceRecorder& r) {
  std::vector<devices::OpDesc> ops;
  for (const auto& e : r.trace().events())
    if (e.type == devices::TraceEvent::Type::kCompute) ops.push_back(e.op);
  return ops;
}

const devices::OpDesc& only(const std::vector<devices::OpDesc>& ops, const std::string& name) {
  const devices::OpDesc* found = nullptr;
  for (const auto& op : ops) {
    if (op.name != name) continue;
    EXPECT_EQ(found, nullptr) << "more than one " << name;
    found = &op;
  }
  if (!found) {
    ADD_FAILURE() << "no op " << name;
    static const devices::OpDesc none;
    return none;
  }
  return *found;
}

TEST(FusedRecording, LinearIsOneMatmulForwardAndItsTwoProductsBackward) {
  // x [2, 5, 12] (10 rows), weight [7, 12].
  Linear lin(12, 7, kMeta);
  auto x = torch::empty({2, 5, 12}, kMeta).requires_grad_(true);
  std::vector<devices::OpDesc> ops;
  {
    TraceRecorder rec(RecordOptions(true, true));
    lin(x).sum().backward();
    ops = ops_of(rec);
    EXPECT_EQ(rec.op_counts().count("aten::mm"), 0u) << "the composite matmul leaked out of the scope";
  }
  const devices::OpDesc& f = only(ops, "titan::linear");
  EXPECT_EQ(f.kind, devices::OpKind::kMatmul);
  EXPECT_EQ(f.mm.m, 10);
  EXPECT_EQ(f.mm.n, 7);
  EXPECT_EQ(f.mm.k, 12);
  EXPECT_DOUBLE_EQ(f.flops, 2.0 * 10 * 7 * 12);
  EXPECT_EQ(f.bytes_read, (10 * 12 + 12 * 7) * 4);
  EXPECT_EQ(f.bytes_written, 10 * 7 * 4);
  const devices::OpDesc& dx = only(ops, "titan::linear_input_grad");
  EXPECT_DOUBLE_EQ(dx.flops, 2.0 * 10 * 12 * 7);
  const devices::OpDesc& dw = only(ops, "titan::linear_weight_grad");
  EXPECT_EQ(dw.mm.m, 7);
  EXPECT_EQ(dw.mm.n, 12);
  EXPECT_EQ(dw.mm.k, 10);

  // No input gradient wanted: the backward computes only dw, as the real kernel does.
  auto x0 = torch::empty({10, 12}, kMeta);
  TraceRecorder rec(RecordOptions(true, true));
  lin(x0).sum().backward();
  EXPECT_EQ(rec.op_counts().count("titan::linear_input_grad"), 0u);
  EXPECT_EQ(rec.op_counts().at("titan::linear_weight_grad"), 1);
}

// pow's sub-calls in libtorch 1.13 are metadata (result_type, a same-dtype `to`): pow is the
// leaf with its own traffic; an op that returns its input (type_as to its own dtype) is no work.
TEST(Recording, PowIsALeafAndMetadataQueriesAreNot) {
  auto x = torch::empty({64, 32}, kMeta);
  TraceRecorder rec(RecordOptions(true, true));
  auto y = x.pow(2);
  ASSERT_EQ(rec.op_counts().count("aten::pow"), 1u);
  EXPECT_EQ(rec.op_counts().at("aten::pow"), 1);
  EXPECT_EQ(rec.op_counts().count("aten::result_type"), 0u);
  const devices::OpDesc& p = only(ops_of(rec), "aten::pow");
  EXPECT_EQ(p.bytes_read, 64 * 32 * 4);
  EXPECT_EQ(p.bytes_written, 64 * 32 * 4);
  auto moving = [&] {
    int64_t n = 0;
    for (const auto& op : ops_of(rec)) n += op.kind != devices::OpKind::kView;
    return n;
  };
  const int64_t before = moving();
  auto same = x.type_as(y);
  EXPECT_EQ(moving(), before) << "a same-dtype type_as moved no data";
  auto out = torch::empty({64, 32}, kMeta);
  torch::mul_out(out, x, x);  // returns its `out` argument, and did the work
  EXPECT_EQ(moving(), before + 1);
  auto half = x.to(torch::kBFloat16);
  EXPECT_EQ(moving(), before + 2) << "a real cast is recorded";
}

// Gradient accumulation: the real linear sums later micro-batches' dW into w.grad() in place,
// so a recording holds no add_ for the weight (the first backward assigns the gradient).
TEST(FusedRecording, AccumulatedLinearWeightGradientIsSummedInPlace) {
  Linear lin(12, 7, kMeta);
  auto x = torch::empty({10, 12}, kMeta);
  lin(x).sum().backward();  // w.grad() now exists, as the optimizer's flat buffer does in a run
  ASSERT_TRUE(lin->weight.grad().defined());
  TraceRecorder rec(RecordOptions(true, true));
  lin(x).sum().backward();
  EXPECT_EQ(rec.op_counts().count("aten::add_"), 0u) << "a fresh dW was added to the gradient";
  EXPECT_EQ(rec.op_counts().at("titan::linear_weight_grad"), 1);
}

TEST(FusedRecording, RmsNormIsOneOpWithTheKernelsBytesAndFlops) {
  RMSNorm norm(16, 1e-6, kMeta);
  auto x = torch::empty({3, 4, 16}, kMeta).requires_grad_(true);  // 12 rows of 16
  TraceRecorder rec(RecordOptions(true, true));
  norm(x).sum().backward();
  const auto ops = ops_of(rec);
  const devices::OpDesc& f = only(ops, "titan::rms_norm");
  EXPECT_EQ(f.kind, devices::OpKind::kFused);
  EXPECT_EQ(f.bytes_read, (192 + 16) * 4);    // x and w
  EXPECT_EQ(f.bytes_written, (192 + 12) * 4);  // y and one rstd per row
  EXPECT_DOUBLE_EQ(f.flops, 4.0 * 192);
  const devices::OpDesc& b = only(ops, "titan::rms_norm_backward");
  EXPECT_EQ(b.bytes_read, (2 * 192 + 16 + 12) * 4);
  EXPECT_DOUBLE_EQ(b.flops, 10.0 * 192);
  for (const char* composite : {"aten::pow", "aten::rsqrt", "aten::mean", "aten::mul"})
    EXPECT_EQ(rec.op_counts().count(composite), 0u) << composite;
}

// The memory walk names the kernel that made each tensor: a kernel scope's output and the
// gradients of its backward are the kernel's writes (before, a scope recorded none, and its
// tensors were charged to the next op that touched them: the norm's output to the linear
// reading it, the linear's input gradient to the norm's backward, after the peak).
TEST(FusedRecording, MemoryPeakNamesTheKernelsThatMadeItsTensors) {
  constexpr int64_t rows = 64, dim = 1024;
  RMSNorm norm(dim, 1e-6, kMeta);
  Linear lin(dim, 2, kMeta);
  auto x = torch::empty({rows, dim}, kMeta);
  TraceRecorder rec(RecordOptions(false, true));
  lin(norm(x)).sum().backward();
  const devices::StepMemory memory = devices::trace_memory(rec.finish());
  const devices::TraceMemory& m = memory.eager();
  // The peak is the linear's weight gradient: the norm's output (saved for it) and the
  // gradient of that output (the linear's input gradient, for the norm's backward) are live.
  const int64_t activation = rows * dim * 4;
  std::map<std::string, int64_t> by(m.peak_by_op.begin(), m.peak_by_op.end());
  EXPECT_EQ(by["titan::rms_norm"], activation);
  EXPECT_EQ(by["titan::linear_input_grad"], activation);
  EXPECT_LT(m.peak_temporaries, 2 * activation + 4096);
}

// Where attention is kept as one flash kernel over the composite ops (accelerators), the
// gradients its backward nodes make are seen only when the next node takes them: they are
// written by the kernel's backward op (before, by nothing: named after their first reader).
TEST(Recording, AttentionBackwardWritesTheGradientsOfQKAndV) {
  ModelArgs a = tiny_model_args();
  Transformer model(a, 16, kMeta.dtype(torch::kFloat32));
  model->set_fused_kernels(FusedKernels::all(false));
  auto tokens = torch::empty({2, 16}, kMeta.dtype(torch::kInt64));
  TraceRecorder rec(RecordOptions(true, false));
  cross_entropy_sum(model->forward(tokens), tokens, 32.0, false).backward();
  int backwards = 0;
  for (const auto& e : rec.finish().events()) {
    if (e.type != devices::TraceEvent::Type::kCompute || e.op.name != std::string(kAttentionScope) + "_backward") continue;
    ++backwards;
    const int64_t q = 2 * 4 * 16 * 8 * 4, kv = 2 * 2 * 16 * 8 * 4;  // [B, H or KV, S, D] floats
    ASSERT_EQ(e.op.writes.size(), 3u);
    EXPECT_EQ(e.op.writes[0].bytes + e.op.writes[1].bytes + e.op.writes[2].bytes, q + 2 * kv);
  }
  EXPECT_EQ(backwards, 2);
}

// Forward and backward of a 2-layer model on the meta device (or for real on the CPU).
std::map<std::string, int64_t> record_model(bool model_fused, bool recorder_fused, torch::Dtype dtype,
                                            bool meta = true) {
  ModelArgs a = tiny_model_args();
  const auto opts = meta ? kMeta : torch::TensorOptions();
  Transformer model(a, 16, opts.dtype(dtype));
  if (!meta) model->init_weights(1);
  model->set_fused_kernels(FusedKernels::all(model_fused));
  auto tokens = meta ? torch::empty({2, 16}, kMeta.dtype(torch::kInt64)) : torch::randint(50, {2, 16}, torch::kInt64);
  TraceRecorder rec(RecordOptions(false, recorder_fused));  // attention as the cpu device records it
  cross_entropy_sum(model->forward(tokens), tokens, 32.0, model_fused).backward();
  return rec.op_counts();
}

TEST(FusedRecording, ModelStepHoldsEachKernelOncePerCall) {
  auto c = record_model(true, true, torch::kFloat32);
  // Per layer: 7 projections, 4 norms (attention, ffn, q, k), rope on q and k, attention,
  // SwiGLU; plus the output head, the final norm and the loss.
  EXPECT_EQ(c["titan::linear"], 2 * 7 + 1);
  EXPECT_EQ(c["titan::linear_weight_grad"], 2 * 7 + 1);
  EXPECT_EQ(c["titan::rms_norm"], 2 * 4 + 1);
  EXPECT_EQ(c["titan::rms_norm_backward"], 2 * 4 + 1);
  EXPECT_EQ(c["titan::rope"], 2 * 2);
  EXPECT_EQ(c["titan::rope_backward"], 2 * 2);
  EXPECT_EQ(c["titan::fused_attention"], 2);
  EXPECT_EQ(c["titan::fused_attention_backward"], 2);
  EXPECT_EQ(c["titan::swiglu"], 2);
  EXPECT_EQ(c["titan::swiglu_backward"], 2);
  EXPECT_EQ(c["titan::cross_entropy"], 1);
  EXPECT_EQ(c["titan::cross_entropy_backward"], 1);
  for (const char* composite : {"aten::mm", "aten::bmm", "aten::softmax", "aten::_softmax", "aten::silu",
                                "aten::rsqrt", "aten::_log_softmax", "aten::sum"})
    EXPECT_EQ(c.count(composite), 0u) << composite << " recorded beside the fused kernels";
  // What runs between the kernels is what a real CPU run of the same step runs: the residual
  // adds and the gradient sums where a tensor feeds two consumers (none of the composite ops'
  // own broadcast reductions or gradient sums). (Copies differ: a real run's kernels make their
  // inputs contiguous themselves, inside the kernel's measured time.)
  auto real = record_model(true, true, torch::kFloat32, /*meta=*/false);
  EXPECT_GT(real["aten::add"], 0);
  EXPECT_EQ(c["aten::add"], real["aten::add"]);
}

TEST(FusedRecording, SwitchOffDtypeOrDeviceKeepTheCompositeOps) {
  // training.fused_kernels = false: the real run takes the composite path, and so does the
  // recording. bfloat16 (the kernels take float and double only) and a recorder for an
  // accelerator (its framework runs its own kernels) record the composite ops too.
  for (auto [model_fused, recorder_fused, dtype] : {std::tuple{false, true, torch::kFloat32},
                                                   std::tuple{true, true, torch::kBFloat16},
                                                   std::tuple{true, false, torch::kFloat32}}) {
    auto c = record_model(model_fused, recorder_fused, dtype);
    for (const auto& [name, n] : c)
      EXPECT_TRUE(!devices::is_fused_kernel_op(name)) << name << " recorded with fused " << model_fused
                                                       << ", recorder " << recorder_fused;
    EXPECT_EQ(c["aten::mm"], 3 * (2 * 7 + 1));
    EXPECT_GT(c["aten::bmm"], 0);
    EXPECT_GT(c["aten::rsqrt"], 0);
    EXPECT_GT(c["aten::silu"], 0);
  }
}

TEST(FusedRecording, OptimizerIsOneFlatPassForFloatParametersOnly) {
  // Two float parameters (the flat buffer a CPU run keeps) and one bfloat16 (per-tensor ops,
  // on CPU too).
  std::vector<NamedParam> params = {{"a", torch::empty({8, 4}, kMeta)},
                                    {"b", torch::empty({5}, kMeta)},
                                    {"c", torch::empty({3, 3}, kMeta.dtype(torch::kBFloat16))}};
  for (auto& p : params) p.param.mutable_grad() = torch::empty_like(p.param);
  AdamW opt(params, OptimizerSection{});
  TraceRecorder rec(RecordOptions(true, true));
  opt.grad_sq_norm();
  opt.step(1e-3, 1.0);
  const auto ops = ops_of(rec);
  const devices::OpDesc& adam = only(ops, "titan::adamw");
  EXPECT_EQ(adam.bytes_read, 4 * 37 * 4);  // parameter, gradient, two moments of 37 floats
  EXPECT_EQ(adam.bytes_written, 3 * 37 * 4);
  EXPECT_EQ(only(ops, "titan::sum_squares").bytes_read, 37 * 4);
  // The bfloat16 parameter's update stays per tensor: one addcdiv_ (and one sum for its norm).
  EXPECT_EQ(rec.op_counts().at("aten::addcdiv_"), 1);
  EXPECT_EQ(rec.op_counts().at("aten::sum"), 1);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
