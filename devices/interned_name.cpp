// The pool of interned names (see interned_name.h).
#include "devices/interned_name.h"

#include <memory>
#include <mutex>
#include <unordered_map>

namespace titan::devices {

namespace {

struct Pool {
  std::mutex mu;
  // Keyed by a view of the string it owns: looking a name up allocates nothing, and the
  // strings never move, so the pointers handed out stay valid.
  std::unordered_map<std::string_view, std::unique_ptr<const std::string>> names;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: names outlive every static that holds an op
  return *p;
}

const std::string* intern(std::string_view name) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.names.find(name);
  if (it != p.names.end()) return it->second.get();
  auto owned = std::make_unique<const std::string>(name);
  const std::string* s = owned.get();
  p.names.emplace(std::string_view(*s), std::move(owned));
  return s;
}

}  // namespace

InternedName::InternedName() {
  static const std::string* const empty = intern(std::string_view());
  name_ = empty;
}

InternedName::InternedName(std::string_view name) : name_(intern(name)) {}

}  // namespace titan::devices
