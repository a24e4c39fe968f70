// Shared main for multi-rank GoogleTest binaries run under mpirun: parses --backend=NAME,
// holds one World per collective mode for the tests, and makes every rank's failure fail
// the job. Used by tests/collectives and tests/parallel multi-rank binaries.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "collectives/world.h"

namespace titan::testing {

inline std::string& backend_flag() {
  static std::string b = "mpi";
  return b;
}

inline std::map<std::string, std::shared_ptr<World>>& worlds() {
  static std::map<std::string, std::shared_ptr<World>> w;
  return w;
}

// The World for a collective mode ("fused" or "separate"); a tiny bucket cap makes the
// fused mode split lists into several buckets.
inline World& world(const std::string& mode = "fused") {
  auto& w = worlds()[mode];
  if (!w) {
    CommOptions o;
    o.backend = backend_flag();
    o.collective_mode = parse_collective_mode(mode);
    o.bucket_cap_mb = 0.01;
    o.train_timeout_seconds = 30;
    o.init_timeout_seconds = 30;
    w = init_distributed(o);
  }
  return *w;
}

// On ranks other than 0: print failures only, prefixed with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "rank %d: %s:%d: Failure\n%s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

inline int run_multirank_main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--backend=", 10) == 0) backend_flag() = argv[i] + 10;
  // Both worlds exist before any test, in the same order on every rank.
  world("fused");
  world("separate");
  // Only rank 0 prints progress; every rank still reports its own failures.
  if (world().rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(world().rank()));
  }
  int rc = RUN_ALL_TESTS();
  if (rc != 0) std::fprintf(stderr, "rank %d: tests FAILED\n", world().rank());
  worlds().clear();
  return rc;
}

}  // namespace titan::testing
