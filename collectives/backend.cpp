#include "collectives/backend.h"

#include <map>
#include <mutex>

#include "common/error.h"

namespace titan {

namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

std::map<std::string, BackendFactory>& registry() {
  static std::map<std::string, BackendFactory> r;
  return r;
}

// Explicit calls, not static initializers: objects of a static library that nothing
// references are dropped by the linker, and their registrations with them.
void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_mpi_backend();
    register_gloo_backend();
    register_sim_backend();
  });
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[name] = std::move(factory);
}

std::vector<std::string> backend_names() {
  register_builtin_backends();
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [name, f] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Backend> make_backend(const CommOptions& options) {
  register_builtin_backends();
  BackendFactory factory;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(options.backend);
    if (it != registry().end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
    TITAN_CONFIG_FAIL("comm.backend: unknown backend \"", options.backend, "\" (known: ", known,
                      ")");
  }
  return factory(options);
}

}  // namespace titan
