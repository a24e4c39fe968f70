#include "trainer/simulate/storage_ids.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace titan {
namespace {

struct SeenStorage {
  const c10::StorageImpl* impl = nullptr;
  int64_t id = 0;
  c10::weak_intrusive_ptr<c10::StorageImpl> weak;
  int64_t bytes = 0;  // when first seen
};
std::mutex storage_mu;
// Every storage seen, in first-sight order, found through an open-addressing table of
// positions (a recording sees a few thousand storages: no node allocated per storage).
std::vector<SeenStorage> seen;
std::vector<uint32_t> slots;  // position in `seen` + 1, 0 empty; a power of two long

size_t slot_of(const c10::StorageImpl* impl) {
  const size_t mask = slots.size() - 1;
  size_t h = (reinterpret_cast<uintptr_t>(impl) >> 4) * 0x9E3779B97F4A7C15ull >> 20;
  for (h &= mask; slots[h] != 0 && seen[slots[h] - 1].impl != impl; h = (h + 1) & mask) {
  }
  return h;
}
// The entry of impl, or nullptr.
SeenStorage* find_seen(const c10::StorageImpl* impl) {
  if (slots.empty()) return nullptr;
  const uint32_t at = slots[slot_of(impl)];
  return at == 0 ? nullptr : &seen[at - 1];
}
// The entry of t's storage (impl), made if new: ids count the storages seen.
SeenStorage& find_or_add(const c10::StorageImpl* impl, const at::Tensor& t) {
  if (2 * (seen.size() + 1) > slots.size()) {
    slots.assign(std::max<size_t>(1024, 2 * slots.size()), 0);
    for (size_t i = 0; i < seen.size(); ++i) slots[slot_of(seen[i].impl)] = static_cast<uint32_t>(i + 1);
  }
  const size_t h = slot_of(impl);
  if (slots[h] != 0) return seen[slots[h] - 1];
  seen.push_back({impl, static_cast<int64_t>(seen.size()) + 1, t.storage().getWeakStorageImpl(),
                  static_cast<int64_t>(t.storage().nbytes())});
  slots[h] = static_cast<uint32_t>(seen.size());
  return seen.back();
}

// Ids looked up lately, per thread: a recorded step asks for the same few storages over and
// over (every op's inputs and outputs). An entry holds while `generation` is the one it was
// made under: forgetting the storages or aliasing one starts a new generation. The map's weak
// references keep a numbered StorageImpl's memory, so its address names it until then.
std::atomic<uint64_t> generation{1};
struct CachedId {
  const c10::StorageImpl* impl = nullptr;
  uint64_t generation = 0;
  int64_t id = 0;
};
constexpr size_t kCachedIds = 256;
thread_local CachedId cached_ids[kCachedIds];
CachedId& cache_slot(const c10::StorageImpl* impl) {
  return cached_ids[(reinterpret_cast<uintptr_t>(impl) >> 4) % kCachedIds];
}

}  // namespace

int64_t storage_id(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return 0;
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  CachedId& slot = cache_slot(impl);
  const uint64_t now = generation.load(std::memory_order_acquire);
  if (slot.impl == impl && slot.generation == now) return slot.id;
  std::lock_guard<std::mutex> lock(storage_mu);
  const int64_t id = find_or_add(impl, t).id;
  slot = {impl, now, id};
  return id;
}

int64_t known_storage_id(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return 0;
  std::lock_guard<std::mutex> lock(storage_mu);
  const SeenStorage* s = find_seen(t.storage().unsafeGetStorageImpl());
  return s ? s->id : 0;
}

void alias_storage(const at::Tensor& t, int64_t id) {
  if (!t.defined() || !t.has_storage() || id == 0) return;
  std::lock_guard<std::mutex> lock(storage_mu);
  if (SeenStorage* s = find_seen(t.storage().unsafeGetStorageImpl())) s->id = id;
  generation.fetch_add(1, std::memory_order_acq_rel);
}

std::vector<devices::StorageRecord> storage_table() {
  std::lock_guard<std::mutex> lock(storage_mu);
  std::vector<devices::StorageRecord> table(seen.size());
  for (const SeenStorage& s : seen) {
    devices::StorageRecord& r = table[static_cast<size_t>(s.id - 1)];
    r = {std::max(r.bytes, s.bytes), r.outlives_step || !s.weak.expired()};
  }
  return table;
}

void forget_storages() {
  std::lock_guard<std::mutex> lock(storage_mu);
  seen.clear();
  slots.clear();
  generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace titan
