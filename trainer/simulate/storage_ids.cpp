#include "trainer/simulate/storage_ids.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace titan {
namespace {

struct SeenStorage {
  int64_t id = 0;
  c10::weak_intrusive_ptr<c10::StorageImpl> weak;
  int64_t bytes = 0;  // when first seen
};
std::mutex storage_mu;
std::unordered_map<const c10::StorageImpl*, SeenStorage> storage_ids;

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
  auto it = storage_ids.find(impl);
  if (it == storage_ids.end())
    it = storage_ids
             .emplace(impl, SeenStorage{static_cast<int64_t>(storage_ids.size()) + 1, t.storage().getWeakStorageImpl(),
                                        static_cast<int64_t>(t.storage().nbytes())})
             .first;
  slot = {impl, now, it->second.id};
  return it->second.id;
}

int64_t known_storage_id(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return 0;
  std::lock_guard<std::mutex> lock(storage_mu);
  auto it = storage_ids.find(t.storage().unsafeGetStorageImpl());
  return it == storage_ids.end() ? 0 : it->second.id;
}

void alias_storage(const at::Tensor& t, int64_t id) {
  if (!t.defined() || !t.has_storage() || id == 0) return;
  std::lock_guard<std::mutex> lock(storage_mu);
  auto it = storage_ids.find(t.storage().unsafeGetStorageImpl());
  if (it != storage_ids.end()) it->second.id = id;
  generation.fetch_add(1, std::memory_order_acq_rel);
}

std::vector<devices::StorageRecord> storage_table() {
  std::lock_guard<std::mutex> lock(storage_mu);
  std::vector<devices::StorageRecord> table(storage_ids.size());
  for (const auto& [impl, s] : storage_ids) {
    devices::StorageRecord& r = table[static_cast<size_t>(s.id - 1)];
    r = {std::max(r.bytes, s.bytes), r.outlives_step || !s.weak.expired()};
  }
  return table;
}

void forget_storages() {
  std::lock_guard<std::mutex> lock(storage_mu);
  storage_ids.clear();
  generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace titan
