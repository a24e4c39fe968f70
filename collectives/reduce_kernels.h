// reduce_ordered(): the local reduction step of every reducing collective (all backends).
// Inputs are combined strictly in rank order, ((x0 + x1) + x2) + ..., one element at a
// time, so a result never depends on how tensors were chunked or bucketed: this is what
// makes fused and separate modes (and the mpi and gloo backends) bit-identical.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

#include "collectives/comm_options.h"

namespace titan {

// True for the dtypes reducing ops accept: float32, float64, bfloat16, int32, int64.
bool reducible_dtype(at::ScalarType dtype);

// out[i] = op(inputs[0][i], inputs[1][i], ...) for i < count. out may alias any input.
// bfloat16 accumulates in float32 and rounds once (round to nearest even); kAvg divides
// the sum by inputs.size() before that rounding.
void reduce_ordered(at::ScalarType dtype, ReduceOp op, const void* const* inputs, size_t n,
                    void* out, int64_t count);
inline void reduce_ordered(at::ScalarType dtype, ReduceOp op,
                           const std::vector<const void*>& inputs, void* out, int64_t count) {
  reduce_ordered(dtype, op, inputs.data(), inputs.size(), out, count);
}

}  // namespace titan
