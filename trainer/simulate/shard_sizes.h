// The sizes a parameter's shard gives a storage at a dp_shard degree, and their classes: what
// shard resizing (shard_resize.h) recognises on a probe's storages and rewrites for another
// degree, and what makes a probe degree fit (every class told apart).
#pragma once

#include <cstdint>
#include <string>

namespace titan {

// Elements of an N-element parameter's shard at degree w (FSDP pads the last shard).
inline int64_t shard_len(int64_t numel, int64_t w) { return (numel + w - 1) / w; }

// Size classes on a storage sized by an N-element parameter's shard at degree w.
enum class SizeClass { kNone, kShard, kPadded };

// The class of `bytes` on such a storage, with the element size it implies (*elem).
SizeClass size_class(int64_t bytes, int64_t numel, int64_t w, int64_t* elem);

// Whether every shard-class size at degree w differs from every padded one and from the
// parameter's full and scalar sizes, so that a size on a shard storage tells its class.
// false, with why, when one does not.
bool distinguishable(int64_t numel, int64_t w, std::string* why);

// A size of a class at degree w.
inline int64_t shard_bytes(int64_t numel, bool padded, int64_t elem, int64_t w) {
  return shard_len(numel, w) * (padded ? w : 1) * elem;
}

}  // namespace titan
