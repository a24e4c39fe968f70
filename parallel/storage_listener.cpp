#include "parallel/storage_listener.h"

namespace titan {
namespace {
StorageResizeListener& listener() {
  static StorageResizeListener l;
  return l;
}
}  // namespace

void set_storage_resize_listener(StorageResizeListener l) { listener() = std::move(l); }

void note_storage_bytes(const torch::Tensor& t, int64_t nbytes) {
  if (t.defined() && t.is_meta() && listener()) listener()(t, nbytes);
}

}  // namespace titan
