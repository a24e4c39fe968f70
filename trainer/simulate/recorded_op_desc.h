// One aten call as the trace recorder (trainer/simulate/trace_recorder.cpp) describes it, from
// its inputs alone: its kind, FLOPs and bytes, and which recorded tensors it reads. Kept apart
// from the recorder's callback state; the op-name sets it consults are recorded_op_kinds.h's.
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "devices/compute_cost.h"
#include "trainer/simulate/recorded_op_names.h"

namespace titan {

// Bytes of a tensor (0 if undefined) or of a tensor list's tensors; 0 for anything else.
int64_t tensor_bytes(const at::Tensor& t);
int64_t ivalue_bytes(const c10::IValue& v);
// Appends a use (storage id, bytes) per tensor in v that has storage.
void add_uses(const c10::IValue& v, std::vector<devices::TensorUse>* out);
// The op `op` (its name's kinds: recorded_op_names.h) as far as its inputs tell (bytes_written
// is the caller's, from the outputs), written into *d, a default OpDesc (the caller's frame
// holds it: no OpDesc is moved per call); *first_bytes: the bytes of its first input (what an
// in-place op writes); *first_reads: how many of d->reads are its first input's uses (they
// lead), or kFirstInputNotRead where its reads leave the first input out.
constexpr size_t kFirstInputNotRead = static_cast<size_t>(-1);
void describe_call(const RecordedOpName& op, c10::ArrayRef<const c10::IValue> in, devices::OpDesc* d,
                   int64_t* first_bytes, size_t* first_reads);
// The storages of a call's tensor inputs (at most a few: kept inline).
using InputStorages = c10::SmallVector<const c10::StorageImpl*, 4>;
InputStorages input_storages(c10::ArrayRef<const c10::IValue> in);
// A non-in-place, non-out= call all of whose outputs alias an input (share a storage of
// `inputs`, taken on entry) did no work.
bool returns_an_input(const at::RecordFunction& fn, const InputStorages& inputs);

}  // namespace titan
