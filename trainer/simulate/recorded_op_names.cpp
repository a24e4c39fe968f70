// Interned op names for the trace recorder's callbacks (see recorded_op_names.h).
#include "trainer/simulate/recorded_op_names.h"

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

// A call's name is its operator schema's string, the same pointer on every call of that
// operator, so a small per-thread table keyed by the pointer finds most names without a lock
// or a hash of the characters. Scope and backward-node names live in the RecordFunction
// itself, so a pointer may come back holding another name: a hit is confirmed by comparing the
// characters.
struct CacheSlot {
  const char* key = nullptr;
  const RecordedOpName* entry = nullptr;
};
constexpr size_t kCacheSlots = 512;
thread_local CacheSlot name_cache[kCacheSlots];

}  // namespace

const RecordedOpName& recorded_op_name(const char* name) {
  CacheSlot& slot = name_cache[(reinterpret_cast<uintptr_t>(name) >> 3) % kCacheSlots];
  if (slot.key == name && std::strcmp(slot.entry->name.str().c_str(), name) == 0) return *slot.entry;
  const RecordedOpName& k = lookup(name);
  slot = {name, &k};
  return k;
}

}  // namespace titan
