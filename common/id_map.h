// A map keyed by a recorded storage id. The recorder numbers storages 1, 2, ... (devices::Trace),
// so ids below kDense index a vector, and the walks that look one up per tensor use (a trace's
// last writers, shard plans, live ranges) do no hashing; any other id (negative, or from a
// trace put together by hand) goes to a hash map. Pointers it returns stay valid until the next
// insertion, as with a vector.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace titan {

template <class V>
class IdMap {
 public:
  static constexpr int64_t kDense = int64_t{1} << 22;

  const V* find(int64_t id) const {
    if (dense(id)) {
      const size_t i = static_cast<size_t>(id);
      return i < dense_.size() && dense_[i] ? &*dense_[i] : nullptr;
    }
    auto it = other_.find(id);
    return it == other_.end() ? nullptr : &it->second;
  }
  V* find(int64_t id) { return const_cast<V*>(std::as_const(*this).find(id)); }
  bool contains(int64_t id) const { return find(id) != nullptr; }

  // id -> v if id has no value yet; returns its value and whether it was added.
  std::pair<V*, bool> emplace(int64_t id, V v) {
    if (!dense(id)) {
      auto [it, added] = other_.emplace(id, std::move(v));
      return {&it->second, added};
    }
    std::optional<V>& slot = grow_to(id);
    if (slot) return {&*slot, false};
    slot = std::move(v);
    return {&*slot, true};
  }
  void clear() {
    dense_.clear();
    other_.clear();
  }
  // id -> v, replacing any value.
  void set(int64_t id, V v) {
    if (dense(id)) grow_to(id) = std::move(v);
    else other_[id] = std::move(v);
  }

 private:
  static bool dense(int64_t id) { return id >= 0 && id < kDense; }
  std::optional<V>& grow_to(int64_t id) {
    const size_t i = static_cast<size_t>(id);
    if (i >= dense_.size()) dense_.resize(std::max(i + 1, 2 * dense_.size()));
    return dense_[i];
  }
  std::vector<std::optional<V>> dense_;
  std::unordered_map<int64_t, V> other_;
};

}  // namespace titan
