// Collective benchmark: bus bandwidth of all_reduce / all_gather / reduce_scatter from
// 1 KiB to 64 MiB for each backend next to the raw MPI call in the same run, then 200
// small tensors all-reduced fused vs separate. Run under mpirun, e.g.
//   mpirun -np 2 build/bin/bench_collectives [--backends=mpi,gloo] [--max-mib=64] [--seconds=0.3]
//                                            [--rounds=15]
// Bus bandwidth follows nccl-tests: all_reduce moves 2(n-1)/n of the buffer per rank,
// all_gather and reduce_scatter (n-1)/n of the full buffer.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "bench/bench_options.h"
#include "collectives/mpi_runtime.h"
#include "collectives/world.h"

namespace {

struct Args {
  std::vector<std::string> backends = {"mpi", "gloo"};
  int64_t max_bytes = 64LL << 20;
  double seconds = 0.3;  // per measurement, after warm-up
  int rounds = 15;        // alternating rounds per measurement; each contender keeps its best
};

constexpr const char* kUsage =
    "usage: mpirun -np N bench_collectives [--backends=mpi,gloo] [--max-mib=64] [--seconds=0.3] "
    "[--rounds=15]";

// Every rank parses the same arguments, so every rank stops alike on a bad one.
Args parse(int argc, char** argv) {
  using titan::bench::BenchUsageError;
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const size_t eq = s.find('=');
    const std::string key = s.substr(0, eq);
    if (eq == std::string::npos)
      throw BenchUsageError("unknown option \"" + s + "\" (options take --key=value)");
    const std::string value = s.substr(eq + 1);
    if (key == "--backends") {
      a.backends.clear();
      std::stringstream ss(value);
      std::string b;
      while (std::getline(ss, b, ',')) {
        if (b != "mpi" && b != "gloo")
          throw BenchUsageError("--backends: expected mpi and/or gloo, got \"" + b + "\"");
        a.backends.push_back(b);
      }
      if (a.backends.empty()) throw BenchUsageError("--backends needs at least one of mpi, gloo");
    } else if (key == "--max-mib") {
      a.max_bytes = int64_t{titan::bench::parse_whole(key, value, 1, 4096)} << 20;
    } else if (key == "--seconds") {
      a.seconds = titan::bench::parse_positive(key, value);
    } else if (key == "--rounds") {
      a.rounds = static_cast<int>(titan::bench::parse_whole(key, value, 1, 10000));
    } else {
      throw BenchUsageError("unknown option \"" + s + "\"");
    }
  }
  return a;
}

// Seconds per call of each fn, the slowest rank's view. The machine may be shared, so the
// fns are timed in many short alternating rounds and each keeps its best round:
// interference hits every contender alike and the minimum is what the code can do.
std::vector<double> best_time_per_call(const std::vector<std::function<void()>>& fns,
                                       double seconds, int rounds) {
  std::vector<int> iters;
  for (const auto& fn : fns) {
    fn();  // warm-up
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    fn();
    double one = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &one, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    iters.push_back(std::max(1, std::min(5000, static_cast<int>(seconds / rounds / std::max(one, 1e-7)))));
  }
  std::vector<double> best(fns.size(), 1e30);
  for (int round = 0; round < rounds; ++round) {
    for (size_t f = 0; f < fns.size(); ++f) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < iters[f]; ++i) fns[f]();
      double per = (MPI_Wtime() - t0) / iters[f];
      MPI_Allreduce(MPI_IN_PLACE, &per, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      best[f] = std::min(best[f], per);
    }
  }
  return best;
}

std::string human(int64_t bytes) {
  char buf[32];
  if (bytes >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%lld MiB", static_cast<long long>(bytes >> 20));
  else
    std::snprintf(buf, sizeof buf, "%lld KiB", static_cast<long long>(bytes >> 10));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help") {
      std::printf("%s\n", kUsage);
      return 0;
    }
  }
  Args args;
  try {
    args = parse(argc, argv);
  } catch (const titan::bench::BenchUsageError& e) {
    std::fprintf(stderr, "bench_collectives: %s\n%s\n", e.what(), kUsage);
    return 2;
  }
  titan::ensure_mpi_initialized();  // the raw MPI baseline needs MPI whatever the backend
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  torch::set_num_threads(1);

  // Separate mode: each call is one blocking collective on this thread, like the raw loop.
  std::map<std::string, std::shared_ptr<titan::World>> worlds;
  for (const auto& b : args.backends) {
    titan::CommOptions o;
    o.backend = b;
    o.collective_mode = titan::CollectiveMode::kSeparate;
    worlds[b] = titan::init_distributed(o);
  }
  if (rank == 0) {
    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    std::printf("# titan collectives benchmark: %d ranks, float32, bus bandwidth in GB/s; best of "
                "%d alternating rounds; load average at start %.1f %.1f %.1f\n",
                n, args.rounds, load[0], load[1], load[2]);
    std::printf("%-14s %-8s %10s", "op", "size", "raw_mpi");
    for (const auto& b : args.backends) std::printf(" %10s %8s", b.c_str(), "vs_raw");
    std::printf("\n");
  }
  const double ar_factor = 2.0 * (n - 1) / n, ag_factor = double(n - 1) / n;
  for (const std::string op : {"all_reduce", "all_gather", "reduce_scatter"}) {
    for (int64_t bytes = 1024; bytes <= args.max_bytes; bytes *= 4) {
      const int64_t numel = bytes / 4;  // the full buffer; all_gather input is 1/n of it
      const int64_t block = numel / n;
      auto full = torch::ones({numel});
      auto part = torch::ones({block});
      std::function<void()> raw;
      double factor = op == "all_reduce" ? ar_factor : ag_factor;
      if (op == "all_reduce") {
        raw = [&] {
          MPI_Allreduce(MPI_IN_PLACE, full.data_ptr(), static_cast<int>(numel), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
        };
      } else if (op == "all_gather") {
        raw = [&] {
          MPI_Allgather(part.data_ptr(), static_cast<int>(block), MPI_FLOAT, full.data_ptr(),
                        static_cast<int>(block), MPI_FLOAT, MPI_COMM_WORLD);
        };
      } else {
        raw = [&] {
          MPI_Reduce_scatter_block(full.data_ptr(), part.data_ptr(), static_cast<int>(block),
                                   MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        };
      }
      // Bus bandwidth is counted on the buffer actually moved (block * n for gathers).
      const double moved = op == "all_reduce" ? double(bytes) : double(block * n * 4);
      std::vector<std::function<void()>> fns = {raw};
      // The view is made once, outside the timed calls, as the raw loop uses the pointer.
      at::Tensor gathered = full.narrow(0, 0, block * n);
      for (const auto& b : args.backends) {
        auto comm = worlds[b]->comm();
        if (op == "all_reduce") fns.push_back([comm, &full] { comm->all_reduce(full)->wait(); });
        if (op == "all_gather")
          fns.push_back([comm, &gathered, &part] { comm->all_gather(gathered, part)->wait(); });
        if (op == "reduce_scatter")
          fns.push_back([comm, &gathered, &part] { comm->reduce_scatter(part, gathered)->wait(); });
      }
      auto t = best_time_per_call(fns, args.seconds * fns.size(), args.rounds);
      const double raw_bw = moved * factor / t[0] / 1e9;
      if (rank == 0) {
        std::printf("%-14s %-8s %10.3f", op.c_str(), human(bytes).c_str(), raw_bw);
        for (size_t f = 1; f < t.size(); ++f) {
          const double bw = moved * factor / t[f] / 1e9;
          std::printf(" %10.3f %7.0f%%", bw, 100.0 * bw / raw_bw);
        }
      }
      if (rank == 0) std::printf("\n");
    }
  }

  // 200 gradients of 4-64 KiB, all-reduced as one list: fused buckets vs one op each.
  std::vector<at::Tensor> grads;
  int64_t total = 0;
  for (int i = 0; i < 200; ++i) {
    int64_t kib = 4 + (i * 37) % 61;  // 4..64 KiB
    grads.push_back(torch::ones({kib * 256}));
    total += kib * 1024;
  }
  if (rank == 0)
    std::printf("\n# 200 tensors of 4-64 KiB (%.1f MiB) all-reduced, ms per step\n",
                total / 1048576.0);
  for (const auto& b : args.backends) {
    titan::CommOptions o;
    o.backend = b;
    o.collective_mode = titan::CollectiveMode::kFused;
    auto fused = titan::init_distributed(o);
    auto sep = worlds[b]->comm();
    auto fus = fused->comm();
    auto t = best_time_per_call({[&] { sep->all_reduce(grads)->wait(); },
                                 [&] { fus->all_reduce(grads)->wait(); }},
                                2 * args.seconds, args.rounds);
    if (rank == 0)
      std::printf("%-5s separate %8.3f ms  fused %8.3f ms  speedup %.2fx\n", b.c_str(),
                  1e3 * t[0], 1e3 * t[1], t[0] / t[1]);
  }
  if (rank == 0) {
    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    std::printf("# load average at end %.1f %.1f %.1f\n", load[0], load[1], load[2]);
  }
  worlds.clear();
  return 0;
}
