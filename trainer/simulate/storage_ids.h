// A recorded tensor's identity for the data flow and the memory walk: its storage (views share
// it, in-place ops write it). Each storage seen during a recording gets the next number, and a
// weak reference keeps its StorageImpl's memory (not its data) until the recording ends: an
// address alone would be reused by a later allocation, linking unrelated ops and making the
// trace depend on the process's heap history. The weak reference also tells, when the step is
// over, which storages outlived it (state). Process-wide, as the recorder is; thread safe.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "devices/step_simulator.h"

namespace titan {

// t's id, numbering it if it is new; 0 for an undefined tensor or one without storage.
int64_t storage_id(const at::Tensor& t);
// t's id if it was numbered, else 0.
int64_t known_storage_id(const at::Tensor& t);
// t's storage takes the identity `id` (a buffer the real run writes in place of t).
void alias_storage(const at::Tensor& t, int64_t id);
// Every storage numbered so far, by id (index id - 1): size when first seen, whether it is
// still referenced; aliased storages share an entry (the larger size, state if either is).
std::vector<devices::StorageRecord> storage_table();
void forget_storages();

}  // namespace titan
