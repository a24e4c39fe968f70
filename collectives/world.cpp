#include "collectives/world.h"

#include <exception>
#include <numeric>
#include <set>

#include "common/error.h"

namespace titan {

World::World(const CommOptions& options) : options_(options) {
  validate(options_);
  backend_ = make_backend(options_);
  std::vector<int> all(backend_->size());
  std::iota(all.begin(), all.end(), 0);
  world_ = backend_->new_group(all, "world");
}

World::~World() {
  // While unwinding from an error, peers may never arrive: skip the goodbye and let the
  // error (or the watchdog) end the job.
  if (std::uncaught_exceptions() == 0) backend_->shutdown(*world_);
  world_.reset();
  backend_.reset();
}

std::shared_ptr<Communicator> World::new_group(const std::vector<int>& ranks,
                                               const std::string& name) {
  TITAN_CHECK(!ranks.empty(), "new_group '", name, "': no ranks");
  // A flag per rank, not a std::set: simulated jobs build groups of up to 2^20 ranks, and a
  // set's allocations made the check most of a simulated step's set-up time.
  std::vector<char> seen(static_cast<size_t>(size()), 0);
  for (int r : ranks) {
    TITAN_CHECK(r >= 0 && r < size(), "new_group '", name, "': rank ", r,
                " is outside the job [0, ", size(), ")");
    TITAN_CHECK(!seen[static_cast<size_t>(r)], "new_group '", name, "': rank ", r, " listed twice");
    seen[static_cast<size_t>(r)] = 1;
  }
  TITAN_CHECK(seen[static_cast<size_t>(rank())], "new_group '", name, "': called by rank ", rank(),
              " which is not a member");
  return backend_->new_group(ranks, name);
}

std::shared_ptr<World> init_distributed(const CommOptions& options) {
  return std::make_shared<World>(options);
}

}  // namespace titan
