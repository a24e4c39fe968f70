// Shard size classes (see shard_sizes.h).
#include "trainer/simulate/shard_sizes.h"

namespace titan {

namespace {

// Element sizes a tensor of the step can have (bool/int8 .. double/int64).
constexpr int64_t kElem[] = {1, 2, 4, 8};

}  // namespace

SizeClass size_class(int64_t bytes, int64_t numel, int64_t w, int64_t* elem) {
  const int64_t s = shard_len(numel, w);
  for (int64_t e : kElem) {
    if (bytes == s * e) return *elem = e, SizeClass::kShard;
    if (bytes == s * w * e) return *elem = e, SizeClass::kPadded;
  }
  return SizeClass::kNone;
}

bool distinguishable(int64_t numel, int64_t w, std::string* why) {
  const int64_t s = shard_len(numel, w);
  for (int64_t a : kElem)
    for (int64_t b : kElem) {
      const int64_t shard = s * a, padded = s * w * a;
      if (shard == s * w * b || shard == numel * b || shard == b || padded == numel * b || padded == b) {
        *why = "a " + std::to_string(numel) + "-element parameter's shard sizes at degree " + std::to_string(w) +
               " equal other sizes";
        return false;
      }
    }
  return true;
}

}  // namespace titan
