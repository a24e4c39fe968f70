// Interned op names for the trace recorder's callbacks (see recorded_op_names.h).
#include "trainer/simulate/recorded_op_names.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "parallel/context_parallel.h"
#include "trainer/model/grouped_matmul.h"
#include "trainer/model/hooks/op_save_hook.h"
#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/simulate/recorded_op_kinds.h"
#include "trainer/simulate/trace_recorder.h"

namespace titan {

namespace {

std::unique_ptr<RecordedOpName> classify(std::string name) {
  auto k = std::make_unique<RecordedOpName>();
  k->aten = name.rfind("aten::", 0) == 0;
  k->query = query_op(name);
  k->view = view_ops().count(name) > 0;
  k->child = counts_as_child(name);
  k->reduction = reduction_ops().count(name) > 0;
  k->movement = movement_ops().count(name) > 0;
  k->writes_only = writes_only(name);
  k->in_place = !name.empty() && name.back() == '_';
  k->mm = name == "aten::mm" || name == "aten::bmm";
  k->addmm = name == "aten::addmm" || name == "aten::baddbmm";
  k->copy = name == "aten::copy_";
  k->block_scope = name == kBlockScope;
  k->kept_output_scope = name == kKeptOutputScope;
  k->ring_attention_block_scope = name == kRingAttentionBlockScope;
  k->attention_scope = name == kAttentionScope;
  k->grouped_matmul_scope = name == kGroupedMatmulScope;
  k->fused_cross_entropy_scope = name == kFusedCrossEntropyScope;
  k->fused_kernel_grads_scope = name == kFusedKernelGradsScope;
  k->name = name;
  return k;
}

// Every name seen, keyed by a view of the entry's own string.
std::mutex names_mu;
std::unordered_map<std::string_view, std::unique_ptr<RecordedOpName>>& names() {
  static auto* m = new std::unordered_map<std::string_view, std::unique_ptr<RecordedOpName>>();
  return *m;  // never destroyed: callbacks may run during static destruction
}

const RecordedOpName& lookup(const char* name) {
  std::lock_guard<std::mutex> lock(names_mu);
  auto& m = names();
  auto it = m.find(std::string_view(name));
  if (it == m.end()) {
    std::unique_ptr<RecordedOpName> k = classify(name);
    const std::string_view key(k->name.str());
    it = m.emplace(key, std::move(k)).first;
  }
  return *it->second;
}

// A small per-thread table in front of the locked one, keyed by the characters: their length
// and first and last eight bytes pick a slot, and a hit is confirmed by comparing them. Keyed
// by the name's pointer instead, it missed 75% of launch/bench-study's lookups (a backward
// node's or a scope's name lives in the RecordFunction, a new pointer on every call), each a
// lock and a hash of the characters; keyed by them, 6%.
struct CacheSlot {
  const RecordedOpName* entry = nullptr;
};
constexpr size_t kCacheSlots = 512;
thread_local CacheSlot name_cache[kCacheSlots];

size_t slot_of(const char* name, size_t len) {
  uint64_t head = 0, tail = 0;
  std::memcpy(&head, name, std::min<size_t>(len, 8));
  if (len > 8) std::memcpy(&tail, name + len - std::min<size_t>(len - 8, 8), std::min<size_t>(len - 8, 8));
  uint64_t h = (head * 0x9E3779B97F4A7C15ull) ^ (tail * 0xC2B2AE3D27D4EB4Full) ^ len;
  return static_cast<size_t>((h ^ (h >> 29)) % kCacheSlots);
}

}  // namespace

const RecordedOpName& recorded_op_name(const char* name) {
  const size_t len = std::strlen(name);
  CacheSlot& slot = name_cache[slot_of(name, len)];
  if (slot.entry) {
    const std::string& s = slot.entry->name.str();
    if (s.size() == len && std::memcmp(s.data(), name, len) == 0) return *slot.entry;
  }
  const RecordedOpName& k = lookup(name);
  slot.entry = &k;
  return k;
}

}  // namespace titan
