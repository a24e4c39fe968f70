// recording_bench: what recording a step costs over the step itself. The trainer's first step
// on the meta device, as a study's recorder runs it, timed (thread CPU, median of the rounds)
// five ways: bare; under a RecordFunction callback that does nothing; the same asking for the
// ops' inputs, then inputs and outputs (libtorch boxes them per call); and under the trace
// recorder. Each is printed with its ratio to bare, measured in the same run, so the split
// holds on any machine's speed. Run by launch/bench-recording.
#include <ATen/record_function.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "common/error.h"
#include "trainer/config/config_loader.h"
#include "trainer/simulate/simulate.h"
#include "trainer/simulate/trace_recorder.h"
#include "trainer/step/trainer.h"

namespace {

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

std::unique_ptr<at::ObserverContext> ignore_enter(const at::RecordFunction&) { return nullptr; }
void ignore_exit(const at::RecordFunction&, at::ObserverContext*) {}

enum class Way { kBare, kCallback, kInputs, kInputsOutputs, kRecorder };
constexpr Way kWays[] = {Way::kBare, Way::kCallback, Way::kInputs, Way::kInputsOutputs, Way::kRecorder};
const char* way_name(Way w) {
  switch (w) {
    case Way::kBare: return "bare step";
    case Way::kCallback: return "+ RecordFunction callback (does nothing)";
    case Way::kInputs: return "+ inputs boxed";
    case Way::kInputsOutputs: return "+ inputs and outputs boxed";
    case Way::kRecorder: return "trace recorder";
  }
  return "";
}

// One first step of a fresh trainer, timed; the callback or recorder only around the step.
double time_step(const titan::JobConfig& cfg, Way way) {
  titan::Trainer trainer(cfg, titan::sim_world(cfg, cfg.simulation.num_chips, 0), /*on_meta=*/true);
  at::CallbackHandle handle = 0;
  std::unique_ptr<titan::TraceRecorder> recorder;
  if (way == Way::kCallback || way == Way::kInputs || way == Way::kInputsOutputs)
    handle = at::addGlobalCallback(at::RecordFunctionCallback(&ignore_enter, &ignore_exit)
                                       .needsInputs(way != Way::kCallback)
                                       .needsOutputs(way == Way::kInputsOutputs)
                                       .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                                                at::RecordScope::USER_SCOPE}));
  if (way == Way::kRecorder)
    recorder = std::make_unique<titan::TraceRecorder>(
        titan::record_options(titan::simulated_chip(cfg), titan::execution_mode(cfg)));
  const double t0 = thread_cpu_ms();
  trainer.train_step();
  const double ms = thread_cpu_ms() - t0;
  if (handle) at::removeCallback(handle);
  if (recorder) recorder->finish();
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  int rounds = 15;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--rounds") {
      args.emplace_back(argv[i]);
      continue;
    }
    try {
      const std::string value = i + 1 < argc ? argv[i + 1] : "";
      rounds = static_cast<int>(titan::bench::parse_whole("--rounds", value, 1, 100000));
    } catch (const titan::bench::BenchUsageError& e) {
      std::fprintf(stderr, "recording_bench: %s\n", e.what());
      return 2;
    }
    ++i;
  }
  try {
    const titan::JobConfig cfg = titan::load_job_config(args);
    TITAN_CONFIG_CHECK(cfg.parallelism.pipeline_parallel_degree == 1,
                       "parallelism.pipeline_parallel_degree must be 1 (a pipeline rank's step "
                       "is recorded by record_pipeline)");
    std::vector<std::vector<double>> ms(std::size(kWays));
    for (int r = 0; r <= rounds; ++r)  // round 0 warms up
      for (size_t w = 0; w < std::size(kWays); ++w) {
        const double t = time_step(cfg, kWays[w]);
        if (r > 0) ms[w].push_back(t);
      }
    std::vector<double> median(ms.size());
    for (size_t w = 0; w < ms.size(); ++w) {
      std::sort(ms[w].begin(), ms[w].end());
      median[w] = ms[w][ms[w].size() / 2];
    }
    std::printf("one step on the meta device, thread CPU, median of %d rounds:\n", rounds);
    for (size_t w = 0; w < ms.size(); ++w)
      std::printf("  %-42s %8.2f ms  %5.2f x bare\n", way_name(kWays[w]), median[w], median[w] / median[0]);
  } catch (const titan::Error& e) {
    std::fprintf(stderr, "recording_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // torch's, for a shape the model cannot take
    std::fprintf(stderr, "recording_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
