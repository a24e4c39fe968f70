// The trace recorder's RecordFunction callbacks (see recorder_state.h): aten calls ->
// devices::OpDesc (what one aten call costs: recorded_op_desc.h), kept scopes as kernels.
#include "trainer/simulate/recorder_state.h"

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"
#include "devices/fused_ops.h"
#include "parallel/context_parallel.h"
#include "trainer/model/grouped_matmul.h"
#include "trainer/model/hooks/op_save_hook.h"
#include "parallel/storage_listener.h"
#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/model/kernels/meta_kernel.h"
#include "trainer/simulate/block_membership.h"
#include "trainer/simulate/recorded_op_desc.h"
#include "trainer/simulate/recorded_op_kinds.h"
#include "trainer/simulate/recorded_op_names.h"
#include "trainer/simulate/storage_ids.h"
#include "trainer/simulate/trace_recorder.h"

namespace titan::recorder_state {

using devices::OpDesc;
using devices::OpKind;

std::mutex mu;
TraceRecorder* active = nullptr;
bool fuse_attention_scope = true;
bool fuse_kernel_scopes = false;
bool fuse_cross_entropy_scope = false;
bool fuse_grouped_matmul_scope = true;
std::map<std::pair<uint64_t, int64_t>, ScopeInterval> intervals;
int64_t unseen_grads_writer = -1;
uint64_t unseen_grads_thread = 0;

namespace {

// The op as far as its inputs tell; bytes_written is filled at the end from the outputs.
struct Frame : public at::ObserverContext {
  // A frame per RecordFunction callback: each thread keeps the memory of the frames it freed.
  static void* operator new(size_t size);
  static void operator delete(void* p, size_t size);

  Frame* parent = nullptr;
  uint64_t serial = 0;           // this thread's count of frames at its entry (never reused)
  bool has_child = false;
  bool suppressed = false;       // inside an attention scope or an attention backward node
  bool suppress_children = false;
  bool is_op = false;            // an aten op we may record as a leaf
  bool is_view = false;          // a metadata-only op (view_ops)
  bool kernel = false;           // a scope kept as one kernel (attention, a fused kernel)
  bool kept = false;             // inside kKeptOutputScope: a reused output, no forward work
  bool in_block = false;         // inside kBlockScope, or the backward of a node made there
  bool block = false;            // kBlockScope itself (thread and seq_lo: its interval)
  std::vector<devices::TensorUse> kept_inputs;  // what a kept-output scope given inputs touches
  uint64_t thread = 0;
  int64_t seq_lo = 0;
  std::vector<OpDesc> kernel_forward, kernel_backward;  // what the scope's kernel runs
  // A backward node that runs its scope's kernel: kernel_backward is emitted when it returns,
  // with the gradients its stand-in made (kFusedKernelGradsScope) as the ops' writes.
  bool emits_backward = false;
  const RecordedOpName* kinds = nullptr;  // what its name says (recorded_op_names.h)
  OpDesc op;
  int64_t first_input_bytes = 0;
  // What an in-place op writes, its first input's uses: the first first_reads of op.reads, or
  // where those leave it out (kFirstInputNotRead) first_input.
  size_t first_reads = 0;
  std::vector<devices::TensorUse> first_input;
  // An op's tensor inputs' storages: on exit its outputs are compared with them (libtorch
  // keeps fn.inputs() valid only while the entry callbacks run).
  InputStorages input_storages;
  std::vector<devices::TensorUse> first_uses() const {
    if (first_reads == kFirstInputNotRead) return first_input;
    return {op.reads.begin(), op.reads.begin() + static_cast<std::ptrdiff_t>(first_reads)};
  }
};

thread_local Frame* top = nullptr;
thread_local uint64_t frames_entered = 0;

// Freed frames' memory, per thread (a frame is freed on the thread that ran its call, so the
// list holds about as many as the thread's deepest nesting; kMaxSpareFrames bounds it).
struct SpareFrame {
  SpareFrame* next;
};
constexpr int kMaxSpareFrames = 64;
thread_local SpareFrame* spare_frames = nullptr;
thread_local int spare_frame_count = 0;

void* Frame::operator new(size_t size) {
  if (size != sizeof(Frame) || !spare_frames) return ::operator new(size);
  SpareFrame* s = spare_frames;
  spare_frames = s->next;
  --spare_frame_count;
  return s;
}

void Frame::operator delete(void* p, size_t size) {
  if (size != sizeof(Frame) || spare_frame_count >= kMaxSpareFrames) return ::operator delete(p);
  spare_frames = new (p) SpareFrame{spare_frames};
  ++spare_frame_count;
}

}  // namespace

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  auto f = std::make_unique<Frame>();
  f->parent = top;
  f->serial = ++frames_entered;
  const RecordedOpName& kinds = recorded_op_name(fn.name());
  f->kinds = &kinds;
  const std::string& name = kinds.name;
  f->is_view = kinds.view;
  if (top) {
    // A view made of views (reshape -> view) is recorded once, as its innermost call.
    if (kinds.child || top->is_view) top->has_child = true;
    f->suppressed = top->suppressed || top->suppress_children;
    f->kept = top->kept;
    f->in_block = top->in_block;
  }
  const bool node = fn.scope() == at::RecordScope::BACKWARD_FUNCTION;
  if (!node) block_membership::engine_op_after_node(top ? top->serial : 0, &f->in_block);
  if (kinds.block_scope) {
    f->in_block = f->block = true;
    f->thread = fn.threadId();
    f->seq_lo = at::sequence_number::peek();
  } else if (node && fn.seqNr() >= 0 && !f->in_block) {
    f->in_block = block_membership::node_made_in_block(fn.forwardThreadId(), fn.seqNr());
  }
  f->kept = f->kept || kinds.kept_output_scope;
  // A reused op that opens no kernel scope of its own (a zero-bubble pipeline's
  // deferred_linear) hands its inputs to the kept-output scope: the same touch as a reused
  // kernel's below, where the fused kernels' scopes are kept, since only then can those inputs
  // come from a scope that records no outputs (elsewhere the ops that made them wrote them).
  if (kinds.kept_output_scope && fuse_kernel_scopes && !f->suppressed)
    for (const auto& v : fn.inputs()) add_uses(v, &f->kept_inputs);
  if (kinds.ring_attention_block_scope && fuse_attention_scope) {
    // One block of ring attention (context parallel), in forward or in backward: one flash
    // kernel of the block's shape, causal on the diagonal, full elsewhere.
    auto in = fn.inputs();
    TITAN_CHECK(in.size() == 5 && in[0].isTensor() && in[1].isTensor() && in[3].isBool() && in[4].isBool(),
                kRingAttentionBlockScope, ": expected q, k, v, causal, backward as the scope's inputs");
    const at::Tensor q = in[0].toTensor(), k = in[1].toTensor();
    f->kernel = !f->suppressed;
    f->suppress_children = true;
    const devices::AttentionShape s{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), in[3].toBool(),
                                    in[4].toBool()};
    f->kernel_forward = {devices::attention_op(s, static_cast<int64_t>(q.element_size()))};
    f->kernel_forward[0].name = std::string(kRingAttentionBlockScope) + (s.backward ? "_backward" : "");
    for (size_t i = 0; i < 3; ++i) add_uses(in[i], &f->kernel_forward[0].reads);
    f->thread = fn.threadId();
    f->seq_lo = at::sequence_number::peek();
  } else if (kinds.attention_scope && fuse_attention_scope) {
    auto in = fn.inputs();
    TITAN_CHECK(in.size() >= 2 && in[0].isTensor() && in[1].isTensor(), kAttentionScope,
                ": expected q and k as the scope's inputs");
    const at::Tensor q = in[0].toTensor(), k = in[1].toTensor();
    TITAN_CHECK(q.dim() == 4 && k.dim() == 4, kAttentionScope, ": q and k must be [B, H, S, D]");
    f->kernel = !f->suppressed;
    f->suppress_children = true;
    devices::AttentionShape s{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), true, false};
    const int64_t b = static_cast<int64_t>(q.element_size());
    f->kernel_forward = {devices::attention_op(s, b)};
    f->kernel_forward[0].name = kAttentionScope;
    s.backward = true;
    f->kernel_backward = {devices::attention_op(s, b)};
    f->kernel_backward[0].name = std::string(kAttentionScope) + "_backward";
    // Flash attention keeps q, k and v for its backward.
    for (const auto& v : in) add_uses(v, &f->kernel_forward[0].reads), add_uses(v, &f->kernel_backward[0].reads);
    f->thread = fn.threadId();
    f->seq_lo = at::sequence_number::peek();
  } else if (kinds.grouped_matmul_scope && fuse_grouped_matmul_scope && !f->suppressed) {
    // One grouped GEMM over the experts' products, and in backward one per gradient: the
    // inputs' (each expert's rows times its weight) and the weight's (each expert's weight
    // gradient, K = its rows; experts without rows still get theirs written, as zeros).
    auto in = fn.inputs();
    TITAN_CHECK(in.size() == 3 && in[0].isTensor() && in[1].isTensor() && in[2].isIntList(), kGroupedMatmulScope,
                ": expected x, w and the rows per expert as the scope's inputs");
    const at::Tensor x = in[0].toTensor(), w = in[1].toTensor();
    const std::vector<int64_t> rows = in[2].toIntVector();
    const int64_t out = w.size(1), inner = w.size(2), b = static_cast<int64_t>(x.element_size());
    std::vector<devices::MatmulShape> fwd, dx, dw;
    for (int64_t m : rows) {
      fwd.push_back({1, m, out, inner});
      dx.push_back({1, m, inner, out});
      dw.push_back({1, out, inner, m});
    }
    f->kernel = true;
    f->suppress_children = true;
    f->kernel_forward = {devices::grouped_matmul_op(kGroupedMatmulScope, fwd, b)};
    if (x.requires_grad()) f->kernel_backward.push_back(devices::grouped_matmul_op(std::string(kGroupedMatmulScope) + "_backward_input", dx, b));
    if (w.requires_grad()) {
      devices::OpDesc g = devices::grouped_matmul_op(std::string(kGroupedMatmulScope) + "_backward_weight", dw, b);
      g.bytes_written = w.numel() * b;
      f->kernel_backward.push_back(std::move(g));
    }
    for (size_t i = 0; i < 2; ++i) {
      add_uses(in[i], &f->kernel_forward[0].reads);
      if (!f->kernel_backward.empty()) add_uses(in[i], &f->kernel_backward.front().reads);
    }
    f->thread = fn.threadId();
    f->seq_lo = at::sequence_number::peek();
  } else if ((fuse_kernel_scopes || (fuse_cross_entropy_scope && kinds.fused_cross_entropy_scope)) && !f->suppressed &&
             fused_kernel_ops(name, fn.inputs(), &f->kernel_forward, &f->kernel_backward)) {
    // One fused kernel forward (its inputs are what it reads); backward as the attention's.
    f->kernel = true;
    f->suppress_children = true;
    const auto in = fn.inputs();
    for (size_t i = 0; i < in.size(); ++i) {
      add_uses(in[i], &f->kernel_forward.back().reads);
      // What the backward keeps (its first op reads it): live until then in the memory walk.
      if (!f->kernel_backward.empty() && saved_for_backward(name, i)) add_uses(in[i], &f->kernel_backward.front().reads);
    }
    f->thread = fn.threadId();
    f->seq_lo = at::sequence_number::peek();
  } else if (node && fn.seqNr() >= 0 && !f->suppressed) {
    std::lock_guard<std::mutex> lock(mu);
    bool inside = false;  // one of a kept scope's nodes after the first: its inputs are the kernel's own
    auto it = block_membership::interval_holding(intervals, fn.forwardThreadId(), fn.seqNr(),
                                                 [](const ScopeInterval& iv) { return iv.hi; });
    if (it != intervals.end()) {
      f->suppress_children = true;
      inside = it->second.backward_emitted;
      if (!it->second.backward_emitted && active) {
        // The first of the scope's backward nodes autograd reaches runs the whole kernel
        // (recorded when the node returns: nothing inside it is, the kernel's gradients are).
        it->second.backward_emitted = true;
        f->kernel_backward = it->second.backward;
        f->emits_backward = true;
      }
    }
    if (active && !inside && unseen_grads_writer >= 0 && unseen_grads_thread == fn.threadId())
      for (const auto& v : fn.inputs())
        if (v.isTensor() && v.toTensor().defined() && known_storage_id(v.toTensor()) == 0) {
          std::vector<devices::TensorUse> use;
          add_uses(v, &use);
          for (const auto& u : use) active->add_late_write(unseen_grads_writer, u);
        }
  } else if (!f->suppressed && !f->kept && !kinds.query && kinds.aten) {
    f->is_op = true;
    describe_call(kinds, fn.inputs(), &f->op, &f->first_input_bytes, &f->first_reads);
    if (f->first_reads == kFirstInputNotRead) add_uses(fn.inputs()[0], &f->first_input);
    f->input_storages = input_storages(fn.inputs());
  }
  top = f.get();
  return f;
}

namespace {

// Every recorded op goes through here: marked with its frame's block membership. Called with
// `mu` held.
void record(OpDesc&& op, bool in_block) {
  op.outside_blocks = !in_block;
  active->add_compute(std::move(op));
}
void record(const OpDesc& op, bool in_block) { record(OpDesc(op), in_block); }

// The metadata-only op a reused output leaves in place of the op it skipped, reading each of
// that op's inputs once (on_exit says why). Called with `mu` held.
void add_kept_output_touch(const std::vector<devices::TensorUse>& inputs, bool in_block) {
  if (!active || inputs.empty()) return;
  OpDesc touch;
  touch.name = kKeptOutputScope;
  touch.kind = OpKind::kView;
  for (const devices::TensorUse& u : inputs)
    if (std::none_of(touch.reads.begin(), touch.reads.end(), [&](const devices::TensorUse& r) { return r.id == u.id; }))
      touch.reads.push_back(u);
  record(std::move(touch), in_block);
}

void add_uses_of_outputs(const at::RecordFunction& fn, std::vector<devices::TensorUse>* out) {
  for (const auto& v : fn.outputs()) add_uses(v, out);
}

// A stand-in backward's gradients (kFusedKernelGradsScope's outputs) become the writes of the
// kernel backward its node runs: the k-th gradient made is written by the k-th of the kernel's
// backward ops (a linear's input, then weight gradient), the rest by its last op.
void add_kernel_grads(const at::RecordFunction& fn, Frame* node) {
  while (node && !node->emits_backward) node = node->parent;
  if (!node || node->kernel_backward.empty()) return;
  size_t k = 0;
  for (const auto& v : fn.outputs()) {
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    add_uses(v, &node->kernel_backward[std::min(k++, node->kernel_backward.size() - 1)].writes);
  }
}

}  // namespace

void on_exit(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  auto* f = static_cast<Frame*>(ctx);
  if (!f) return;
  top = f->parent;
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION)
    block_membership::node_returned(f->parent ? f->parent->serial : 0, f->in_block);
  if (f->emits_backward) {
    std::lock_guard<std::mutex> lock(mu);
    if (!active) return;
    bool writes = false;
    for (const OpDesc& d : f->kernel_backward) record(d, f->in_block), writes |= !d.writes.empty();
    // A stand-in named its gradients; composite nodes inside the scope made them unseen.
    unseen_grads_writer = writes ? -1 : static_cast<int64_t>(active->trace().compute_ops()) - 1;
    unseen_grads_thread = fn.threadId();
    return;
  }
  if (f->kinds->fused_kernel_grads_scope) return add_kernel_grads(fn, f->parent);
  if (f->block) return block_membership::block_closed(f->thread, f->seq_lo, at::sequence_number::peek());
  if (f->kernel) {
    if (!f->kernel_forward.empty()) add_uses_of_outputs(fn, &f->kernel_forward.back().writes);
    std::lock_guard<std::mutex> lock(mu);
    ScopeInterval iv;
    iv.hi = at::sequence_number::peek();
    iv.backward = std::move(f->kernel_backward);
    if (iv.hi > f->seq_lo) intervals[{f->thread, f->seq_lo}] = std::move(iv);
    if (!active) return;
    if (!f->kept) {
      for (const OpDesc& d : f->kernel_forward) record(d, f->in_block);
      return;
    }
    // A reused output (op-level activation checkpointing's recompute) ran no kernel; the
    // interval above still costs its backward. Its inputs exist from here on in a real run
    // (the recompute made them for this op's backward), which the memory walk sees only if
    // an op touches them here: a scope records no outputs, so the skipped kernel's read was
    // their first use. One metadata-only op reads them (what any of the kernel's ops read).
    std::vector<devices::TensorUse> reads;
    for (const OpDesc& d : f->kernel_forward) reads.insert(reads.end(), d.reads.begin(), d.reads.end());
    add_kept_output_touch(reads, f->in_block);
    return;
  }
  if (!f->kept_inputs.empty()) {
    std::lock_guard<std::mutex> lock(mu);
    add_kept_output_touch(f->kept_inputs, f->in_block);
    return;
  }
  if (!f->is_op || f->has_child) return;  // composite ops: their leaves were recorded
  OpDesc& d = f->op;
  if (d.kind != OpKind::kView && d.name.str().back() != '_' && returns_an_input(fn, f->input_storages)) return;
  std::vector<devices::TensorUse> writes;
  add_uses_of_outputs(fn, &writes);
  // Where the meta device takes a backward formula's out-of-place variant, a real run writes
  // its freshly made first input in place: recorded as the real run does it.
  if (f->parent && f->parent->is_op && in_place_for_real(d.name, f->parent->op.name)) {
    std::vector<devices::TensorUse> first = f->first_uses();
    if (!first.empty()) {
      for (const auto& v : fn.outputs())
        if (v.isTensor()) alias_storage(v.toTensor(), first.front().id);
      writes = std::move(first);
      d.name = d.name + "_";
    }
  }
  // An in-place op (add_, copy_) writes its first input, whatever it returns.
  if (writes.empty() && !d.name.empty() && d.name.str().back() == '_') writes = f->first_uses();
  if (d.kind != OpKind::kMatmul && d.kind != OpKind::kView) {
    int64_t written = 0;
    for (const auto& v : fn.outputs()) written += ivalue_bytes(v);
    if (written == 0 && !d.name.empty() && d.name.str().back() == '_') written = f->first_input_bytes;
    const double elements = static_cast<double>(written) / std::max<int64_t>(1, d.dtype_bytes);
    std::vector<devices::TensorUse> reads = std::move(d.reads);
    d = devices::pointwise_op(d.name, d.kind, d.bytes_read, written, elements);
    d.reads = std::move(reads);
  }
  d.writes = std::move(writes);
  std::lock_guard<std::mutex> lock(mu);
  if (active) record(std::move(d), f->in_block);
}

}  // namespace titan::recorder_state
