#include "trainer/simulate/storage_ids.h"

#include <algorithm>
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

}  // namespace

int64_t storage_id(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return 0;
  std::lock_guard<std::mutex> lock(storage_mu);
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  auto it = storage_ids.find(impl);
  if (it == storage_ids.end())
    it = storage_ids
             .emplace(impl, SeenStorage{static_cast<int64_t>(storage_ids.size()) + 1, t.storage().getWeakStorageImpl(),
                                        static_cast<int64_t>(t.storage().nbytes())})
             .first;
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
}

}  // namespace titan
