// Sweep runner (see sweep_runner.h).
#include "study/sweep_runner.h"

namespace titan::study {

SweepRun run_sweep(const JobConfig& base, const std::vector<Overrides>& combos, RecordingCache& cache, int threads,
                   const std::string& label) {
  SweepRun out;
  out.points.resize(combos.size());
  out.stats = run_parallel(
      static_cast<int64_t>(combos.size()), [&](int64_t i) { out.points[i] = evaluate(base, combos[i], cache); },
      threads, label);
  return out;
}

}  // namespace titan::study
