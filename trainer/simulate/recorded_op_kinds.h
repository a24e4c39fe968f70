// Op-name knowledge of the trace recorder (trainer/simulate/trace_recorder.cpp), kept apart
// from its callback state: pure functions of an op's name (and, for the fused kernels'
// scopes, of the scope's inputs).
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <unordered_set>
#include <vector>

#include "devices/compute_cost.h"

namespace titan {

// Metadata only, or allocation without a write: no HBM traffic.
const std::unordered_set<std::string>& view_ops();
const std::unordered_set<std::string>& reduction_ops();
// Data movement that breaks an elementwise fusion chain (gathers, scatters, concatenation).
const std::unordered_set<std::string>& movement_ops();
// Ops that write their output without reading an input (fills, random init).
bool writes_only(const std::string& name);
// The ops of a fused kernel's scope (trainer/model/kernels/fused_kernels.h), from its inputs;
// false for other names.
bool fused_kernel_ops(const std::string& name, c10::ArrayRef<const c10::IValue> in, std::vector<devices::OpDesc>* fwd,
                      std::vector<devices::OpDesc>* bwd);
// Whether a kernel scope's input `input` is kept for its backward (what the memory walk keeps
// live until then): every input but RoPE's rotated tensor.
bool saved_for_backward(const std::string& scope, size_t input);
// Whether `op` called by `parent` runs in place on its first input in a real (CPU or CUDA) run
// though the meta device runs it out of place: libtorch 1.13's autograd formulas take the
// out-of-place variant for tensor subclasses, and meta tensors count as one (gather's
// backward: scatter_add into new zeros, a second vocabulary-sized buffer in the loss).
bool in_place_for_real(const std::string& op, const std::string& parent);
// Ops that only inspect their inputs' metadata (no kernel, no traffic): never recorded.
bool query_op(const std::string& name);
// Whether a call makes its parent composite (its children then carry the parent's work).
bool counts_as_child(const std::string& name);

}  // namespace titan
