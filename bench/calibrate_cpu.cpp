// calibrate_cpu: measures this host's constants for the simulator's `cpu` device (sgemm rate
// and memory bandwidth per process under the run's process count, MPI latency and bandwidth
// between two ranks, eager per-op overhead, the trainer's fused kernels) and writes the file that
// devices::load_cpu_calibration reads. Run by launch/calibrate-cpu under mpirun -np 2.
#include <mpi.h>
#include <torch/torch.h>

#include "bench/bench_options.h"
#include "devices/fused_ops.h"
#include "trainer/components/flat_kernels.h"
#include "trainer/model/kernels/attention_kernel.h"
#include "trainer/model/kernels/cross_entropy_kernel.h"
#include "trainer/model/kernels/rms_norm_kernel.h"
#include "trainer/model/kernels/rope_kernel.h"
#include "trainer/model/kernels/swiglu_kernel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median time of `reps` runs of fn, every rank at once (the rate under the run's process
// count). The median, not the best: a training step runs long enough to see the host's load
// (other processes, the peer rank), and the step times it is compared with are medians too.
// Each fn call should take tens of milliseconds, so that one run spans several scheduler
// slices and sees the average share of the core rather than a lucky quiet slice.
// An fn that returns a double times itself (the part after its own setup).
template <class F>
double median_time(int reps, F fn) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    if constexpr (std::is_same_v<decltype(fn()), double>) {
      t.push_back(fn());
    } else {
      fn();
      t.push_back(now() - t0);
    }
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Size of the largest CPU cache level in bytes (sysfs), 0 when unknown.
int64_t last_level_cache_bytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (!(f >> s) || s.empty()) continue;
    int64_t mult = 1;
    if (s.back() == 'K') mult = 1024;
    if (s.back() == 'M') mult = 1024 * 1024;
    if (mult > 1) s.pop_back();
    try {
      best = std::max<int64_t>(best, std::stoll(s) * mult);
    } catch (const std::exception&) {
    }
  }
  return best;
}

// The trainer's fused kernels (trainer/model/kernels), each on one shape of a small model's
// step (2048 tokens; operands of a few MB), forward alone and forward + backward with every
// rank at once: rate = the work its op descriptor counts (devices/fused_ops.h: bytes moved;
// FLOPs for attention) / the median time.
struct KernelRate {
  std::string name;
  double rate;
};

std::vector<KernelRate> fused_kernel_rates() {
  namespace d = titan::devices;
  std::vector<KernelRate> out;
  // fn(grad): runs the kernel on fresh leaves (requiring grad when `grad`) and returns its output.
  auto time_kernel = [&](const d::OpDesc& fwd, const d::OpDesc& bwd, auto fn) {
    auto work = [](const d::OpDesc& op) {
      return op.kind == d::OpKind::kAttention ? op.flops : static_cast<double>(op.bytes_read + op.bytes_written);
    };
    auto y = fn(true);
    auto g = torch::ones_like(y);
    y.backward(g);  // warm up (and let the per-shape thread choice settle)
    // Calls per timed run: about 30 ms of forward and backward, 2 to 20 calls.
    const double t0 = now();
    fn(true).backward(g);
    const int calls = static_cast<int>(std::clamp(0.03 / std::max(now() - t0, 1e-9), 2.0, 20.0));
    const double t_fwd = median_time(7, [&] {
      torch::AutoGradMode on(true);
      for (int i = 0; i < calls; ++i) fn(true);
    }) / calls;
    std::vector<torch::Tensor> ys(calls);
    const double t_bwd = median_time(7, [&] {
      torch::AutoGradMode on(true);
      for (auto& out : ys) out = fn(true);
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now();
      for (auto& out : ys) out.backward(g);
      return now() - t0;
    }) / calls;
    out.push_back({fwd.name, work(fwd) / t_fwd});
    out.push_back({bwd.name, work(bwd) / t_bwd});
  };
  const int64_t tokens = 2048, dim = 256, ffn = 768, heads = 8, kv_heads = 4, head_dim = 32, seq = 256, vocab = 1024;
  {
    auto x = torch::randn({tokens, dim}), w = torch::ones({dim});
    time_kernel(d::rms_norm_op(tokens, dim, 4, false), d::rms_norm_op(tokens, dim, 4, true), [&](bool grad) {
      return titan::fused_rms_norm(x.detach().requires_grad_(grad), w.detach().requires_grad_(grad), 1e-6);
    });
  }
  {
    auto a = torch::randn({tokens, ffn}), b = torch::randn({tokens, ffn});
    time_kernel(d::swiglu_op(tokens * ffn, 4, false), d::swiglu_op(tokens * ffn, 4, true), [&](bool grad) {
      return titan::fused_swiglu(a.detach().requires_grad_(grad), b.detach().requires_grad_(grad));
    });
  }
  const int64_t batch = tokens / seq;
  {
    // q as the model holds it: [B, H, S, D] over [B, S, H, D] memory.
    auto x = torch::randn({batch, seq, heads, head_dim}).transpose(1, 2);
    auto cos = torch::randn({seq, head_dim}), sin = torch::randn({seq, head_dim});
    const int64_t e = x.numel();
    time_kernel(d::rope_op(e, cos.numel(), 4, false), d::rope_op(e, cos.numel(), 4, true),
                [&](bool grad) { return titan::fused_rope(x.detach().requires_grad_(grad), cos, sin); });
  }
  {
    auto logits = torch::randn({tokens, vocab});
    auto labels = torch::randint(vocab, {tokens}, torch::kInt64);
    time_kernel(d::cross_entropy_op(tokens, vocab, 4, false), d::cross_entropy_op(tokens, vocab, 4, true),
                [&](bool grad) { return titan::fused_cross_entropy_sum(logits.detach().requires_grad_(grad), labels, 1.0); });
  }
  // Attention on a grid of head_dims and sequences (devices::with_attention_shape), 2048 tokens
  // each.
  for (const int64_t hd : {16, 32, 64, 128}) for (const int64_t sq : {128, 512}) {
    const int64_t b = tokens / sq;
    auto q = torch::randn({b, sq, heads, hd}).transpose(1, 2);
    auto k = torch::randn({b, sq, kv_heads, hd}).transpose(1, 2), v = torch::randn_like(k);
    d::AttentionShape s{b, heads, kv_heads, sq, sq, hd, true, false};
    d::AttentionShape sb = s;
    sb.backward = true;
    d::OpDesc fwd = d::fused_attention_op(s, 4), bwd = d::fused_attention_op(sb, 4);
    fwd.name = d::with_attention_shape(fwd.name, hd, sq);
    bwd.name = d::with_attention_shape(bwd.name, hd, sq);
    time_kernel(fwd, bwd, [&](bool grad) {
      return titan::fused_causal_attention(q.detach().requires_grad_(grad), k.detach().requires_grad_(grad),
                                           v.detach().requires_grad_(grad), 1.0 / std::sqrt(double(hd)));
    });
  }
  {
    // The optimizer's flat passes over a small model's parameters (1M floats, 16 MB of state).
    const int64_t n = int64_t{1} << 20;
    std::vector<float> p(n, 0.5f), g(n, 1e-3f), m(n, 0.f), v(n, 0.f);
    const titan::AdamWCoefs c{1 - 1e-4, 0.9, 0.95, 1e-8, -1e-3, 0.1, 1.0};
    const int calls = 20;
    const double t_adam = median_time(7, [&] {
      for (int i = 0; i < calls; ++i) titan::adamw_update(p.data(), g.data(), m.data(), v.data(), n, c);
    }) / calls;
    const d::OpDesc adam = d::adamw_op(n, 4);
    out.push_back({adam.name, static_cast<double>(adam.bytes_read + adam.bytes_written) / t_adam});
    volatile double sink = 0;  // keeps the sums from being optimized away
    const double t_sq = median_time(7, [&] {
      for (int i = 0; i < calls; ++i) sink += titan::sum_squares(g.data(), n);
    }) / calls;
    const d::OpDesc sq = d::sum_squares_op(n, 4);
    out.push_back({sq.name, static_cast<double>(sq.bytes_read + sq.bytes_written) / t_sq});
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string out = "outputs/cpu_calibration.toml";
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // As titan-train does by default: the host's cores divided among the ranks on it
  // (--threads N: as a run with --training.threads N).
  int threads = std::max(1, cores / size);
  // Every rank parses the same arguments, so every rank stops alike on a bad one.
  try {
    for (int i = 1; i < argc; i += 2) {
      const std::string key = argv[i];
      if (key != "--out" && key != "--threads")
        throw titan::bench::BenchUsageError("unknown option \"" + key + "\"");
      if (i + 1 >= argc) throw titan::bench::BenchUsageError(key + " needs a value");
      if (key == "--out") out = argv[i + 1];
      else threads = static_cast<int>(titan::bench::parse_whole(key, argv[i + 1], 1, 1024));
    }
  } catch (const titan::bench::BenchUsageError& e) {
    if (rank == 0)
      std::fprintf(stderr, "calibrate_cpu: %s\nusage: calibrate_cpu [--out FILE] [--threads N]\n",
                   e.what());
    MPI_Finalize();
    return 2;
  }
  torch::set_num_threads(threads);
  torch::NoGradGuard no_grad;

  // sgemm: the best rate over square shapes large enough to reach the BLAS peak (each run
  // repeats the product to ~0.1 GFLOP x 200).
  double sgemm = 0;
  for (int64_t n : {512, 1024}) {
    auto a = torch::randn({n, n}), b = torch::randn({n, n});
    auto c = torch::mm(a, b);
    const int64_t calls = std::max<int64_t>(1, int64_t{2} * 1000 * 1000 * 1000 / (2 * n * n * n));
    const double t = median_time(7, [&] {
      for (int64_t i = 0; i < calls; ++i) torch::mm_out(c, a, b);
    }) / static_cast<double>(calls);
    sgemm = std::max(sgemm, 2.0 * n * n * n / t);
  }
  // The same BLAS on a short K (attention's q k^T at head_dim 16): 64 products of
  // 128x16 @ 16x128, whose outputs stay in cache; the simulator derives its per-tile cost.
  double sgemm_k16 = 0;
  {
    auto a = torch::randn({64, 128, 16}), b = torch::randn({64, 16, 128});
    auto c = torch::bmm(a, b);
    const double flops = 2.0 * 64 * 128 * 128 * 16;
    const int calls = 200;
    sgemm_k16 = flops * calls / median_time(7, [&] {
      for (int i = 0; i < calls; ++i) torch::bmm_out(c, a, b);
    });
  }
  // Memory bandwidth: a copy far larger than the caches (bytes read + written).
  auto src = torch::ones({int64_t{64} << 20}), dst = torch::empty_like(src);
  dst.copy_(src);
  const double copy_t = median_time(7, [&] { dst.copy_(src); });
  const double mem_bw = 2.0 * static_cast<double>(src.nbytes()) / copy_t;
  // Last-level cache: the host's L3 (sysfs) shared by the ranks on it; the copy bandwidth of a
  // buffer pair (source + destination) of the same size whatever the rank count: together
  // they fill half of a lone rank's cache, and with more ranks at once they contend for it as
  // the ranks of a run do. Repeated to ~2 GB.
  const int64_t host_llc = last_level_cache_bytes();
  const int64_t llc = host_llc / size;
  double cache_bw = 0;
  if (llc >= (int64_t{1} << 20)) {
    auto cs = torch::ones({host_llc / 4 / 4}), cd = torch::empty_like(cs);
    const int64_t calls = std::max<int64_t>(1, (int64_t{2} << 30) / (2 * cs.nbytes()));
    cd.copy_(cs);
    cache_bw = 2.0 * static_cast<double>(cs.nbytes()) * static_cast<double>(calls) /
               median_time(7, [&] {
                 for (int64_t i = 0; i < calls; ++i) cd.copy_(cs);
               });
  }
  // Eager per-op framework overhead as training pays it: tiny ops that autograd records,
  // then their backward (each forward op becomes one backward node running about one op).
  const int n_ops = 4000;
  const double op_t = median_time(7, [&] {
    torch::AutoGradMode grad(true);
    auto x = torch::ones({8}, torch::requires_grad());
    auto y = x;
    for (int i = 0; i < n_ops; ++i) y = y * 1.0001;
    y.sum().backward();
  }) / (2.0 * n_ops);
  // Metadata-only ops (view, transpose, reshape, as_strided, ...: no kernel, no output
  // buffer) cost a fraction of that: same loop with a view op in place of the multiply.
  const double view_t = median_time(7, [&] {
    torch::AutoGradMode grad(true);
    auto x = torch::ones({8}, torch::requires_grad());
    auto y = x * 1.0;
    for (int i = 0; i < n_ops; ++i) y = y.view({2, 4}).view({8});
    y.sum().backward();
  }) / (4.0 * n_ops);

  std::vector<KernelRate> kernels;
  {
    torch::AutoGradMode grad(true);
    kernels = fused_kernel_rates();
  }
  // The slowest rank's rate of each (the step waits for it).
  std::vector<double> mine_k, worst_k(kernels.size());
  for (const KernelRate& k : kernels) mine_k.push_back(-k.rate);
  MPI_Reduce(mine_k.data(), worst_k.data(), static_cast<int>(kernels.size()), MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

  // MPI ping-pong between ranks 0 and 1: latency (8 bytes) and bandwidth (16 MiB).
  auto pingpong = [&](int64_t bytes, int reps) {
    std::vector<char> buf(static_cast<size_t>(bytes));
    double t = median_time(5, [&] {
      for (int r = 0; r < reps; ++r) {
        if (rank == 0) {
          MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD);
          MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
          MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
      }
    });
    return t / reps / 2.0;  // one way
  };
  double lat = 0, bw = 0;
  if (size >= 2) {
    lat = pingpong(8, 2000);
    bw = static_cast<double>(int64_t{16} << 20) / pingpong(int64_t{16} << 20, 10);
  }
  // Report the slowest rank's compute figures (the step waits for it).
  double mine[6] = {-sgemm, -mem_bw, op_t, view_t, -cache_bw, -sgemm_k16}, worst[6];
  MPI_Reduce(mine, worst, 6, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::ofstream f(out);
    f << "# cpu device calibration, measured by launch/calibrate-cpu with " << size
      << " ranks x " << threads << " threads on this host (medians under the host's load)\n";
    f << "sgemm_flops = " << -worst[0] << "\n";
    f << "sgemm_k16_flops = " << -worst[5] << "\n";
    f << "mem_bytes_per_s = " << -worst[1] << "\n";
    f << "mpi_latency_s = " << (size >= 2 ? lat : 2e-6) << "\n";
    f << "mpi_bytes_per_s = " << (size >= 2 ? bw : 5e9) << "\n";
    f << "op_overhead_s = " << worst[2] << "\n";
    f << "view_overhead_s = " << worst[3] << "\n";
    if (llc > 0 && -worst[4] > 0) {
      f << "cache_bytes = " << llc << "\n";
      f << "cache_bytes_per_s = " << -worst[4] << "\n";
    }
    f << "cores = " << cores << "\n";
    f << "threads = " << threads << "\n";
    f << "# fused kernels: bytes moved per second (FLOP/s for attention), devices/fused_ops.h\n";
    f << "[kernel_rates]\n";
    for (size_t i = 0; i < kernels.size(); ++i) {
      f << "\"" << kernels[i].name << "\" = " << -worst_k[i] << "\n";
      std::printf("%s %.3g, ", kernels[i].name.c_str(), -worst_k[i]);
    }
    f.close();
    std::printf("cache %.3g B/s, sgemm K=16 %.3g FLOP/s, ", -worst[4], -worst[5]);
    std::printf("sgemm %.3g FLOP/s, copy %.3g B/s, op overhead %.3g s, view %.3g s, MPI latency %.3g s, "
                "MPI %.3g B/s -> %s\n",
                -worst[0], -worst[1], worst[2], worst[3], lat, bw, out.c_str());
  }
  MPI_Finalize();
  return 0;
}
