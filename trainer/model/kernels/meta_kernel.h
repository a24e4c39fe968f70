// The stand-in of a fused kernel in a simulator recording on the meta device: where a real
// CPU run would take one of the fused kernels (fused_kernels.h), the recording must hold what
// that run holds: one autograd node per kernel call, outputs and gradients in the kernel's
// layouts, and none of the composite ops' autograd structure (their broadcast reductions and
// gradient sums, which the autograd engine runs outside any node). Used by the model and the
// optimizer only while a recorder keeps the fused kernels (trainer/simulate/trace_recorder.h
// sets the switch below); otherwise the meta device runs the composite ops as before.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "trainer/model/hooks/op_save_hook.h"

namespace titan {

// Whether the active recording keeps the fused kernels as one op each (process-wide; one
// recorder at a time).
bool meta_records_fused_kernels();
void set_meta_records_fused_kernels(bool on);
// Whether it keeps the cross entropy as its fused kernel even where it keeps no other (a
// compiler that covers the whole step fuses the loss into the logits' consumers).
bool meta_records_fused_cross_entropy();
void set_meta_records_fused_cross_entropy(bool on);

// Whether the active recording costs the attention scope (kAttentionScope, the composite
// causal attention's ops) as one flash kernel, forward and backward, recording nothing inside
// it (process-wide; one recorder at a time).
bool meta_records_attention_kernel();
void set_meta_records_attention_kernel(bool on);
// The composite causal attention's stand-in on the meta device, for a recording that records
// nothing inside the attention scope: one autograd node whose output and whose gradients of q,
// k and v are empty tensors in the layouts the composite's matmuls give them (contiguous
// [B, H, S, D], and [B, KV, S, D] for k and v), so that every op the recording sees outside
// the scope is the same. The composite's own ops (some thirty with their backward, run again
// in each recomputed block) were a tenth of what a study's recorder processes spent recording.
torch::Tensor meta_attention_stand_in(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// Whether the active recording keeps each grouped-matmul scope (kGroupedMatmulScope) as one
// grouped GEMM forward and one per gradient, recording nothing inside it.
bool meta_records_grouped_matmul_kernel();
void set_meta_records_grouped_matmul_kernel(bool on);
// The experts' loop of products' stand-in on the meta device, for such a recording: one
// autograd node whose output [M, out] and gradients of x [M, in] and w [E, out, in] are new
// contiguous tensors, as the loop's concatenation, split and unbind backward give them.
torch::Tensor meta_grouped_matmul_stand_in(const torch::Tensor& x, const torch::Tensor& w);

// Inside the kernel's scope (`scope`, with `inputs` as its RecordFunction inputs): one autograd
// node whose forward returns output() (an empty meta tensor in the kernel's output layout) and
// whose backward gives every input that needs one an empty gradient in that input's layout.
torch::Tensor meta_kernel(const char* scope, const std::vector<c10::IValue>& inputs,
                          const std::vector<torch::Tensor>& differentiable, const std::function<torch::Tensor()>& output);

// The stand-in of fused_linears (linear_kernel.h), layers that read one x: one linear scope
// per weight, as the real kernel's products, and x's gradient returned once (no autograd sum).
// actions: as fused_linears takes them (a reused product opens its scope inside
// KeptOutputScope, so that only its backward is recorded).
std::vector<torch::Tensor> meta_shared_input_linears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                                     const std::vector<OpSaveAction>& actions = {});

}  // namespace titan
