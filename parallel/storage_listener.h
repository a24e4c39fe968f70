// Storage sizes that change outside any aten op, told to a listener: FSDP frees and refills its
// gathered buffers, and a collective keeps reading a buffer after the last op that touched it
// (an async reduce-scatter's input, a pipeline send). On the meta device storages hold no
// memory, so the simulator's trace recorder listens to learn the sizes a real run would have
// (devices/trace_memory.h). Process-wide; set only while a simulated step is recorded.
#pragma once

#include <cstdint>
#include <functional>

#include <torch/torch.h>

namespace titan {

using StorageResizeListener = std::function<void(const torch::Tensor&, int64_t nbytes)>;
void set_storage_resize_listener(StorageResizeListener listener);

// t's storage now holds nbytes (meta tensors only: a real run's allocator sees the real size).
void note_storage_bytes(const torch::Tensor& t, int64_t nbytes);
// A buffer a collective read until now is released here.
inline void release_storage(const torch::Tensor& t) { note_storage_bytes(t, 0); }

}  // namespace titan
