// ChipSpec and the chip catalog: every simulated accelerator's public figures, read from the
// data files in devices/chips/ (chip_file.h); used by the topology builder, the collective and
// compute cost models, the memory model and the trainer's report.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace titan::devices {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;
constexpr double kTB = 1e12;

// How chips of one kind are wired; decides which topology builder applies.
enum class TopologyFamily {
  kTpuTorus2D,      // v5e, v6e: 2D ICI torus inside a pod, DCN between pods
  kTpuTorus3D,      // v4, v5p, v7: 3D ICI torus built from 4x4x4 cubes, DCN between slices
  kTrainiumTorus,   // trn1/trn2: NeuronLink 4x4 torus per instance (+ ring across an
                    // UltraServer on trn2), EFA between
  kSwitchedDomain,  // GPUs (NVLink switch domain + IB fat tree), trn3 (NeuronLink switch),
                    // cpu (shared-memory MPI "domain" on one host)
};

// Public figures of one chip. Bandwidths are bytes/s, per chip, per direction unless the
// name says otherwise. Each figure's source is in its data file (devices/chips/<name>.toml)
// and in `sources`.
struct ChipSpec {
  std::string name;         // catalog key, e.g. "tpu-v7"
  std::string description;  // e.g. "Google TPU v7 (Ironwood)"
  TopologyFamily family = TopologyFamily::kSwitchedDomain;

  double peak_bf16_flops = 0;  // dense bf16 peak, FLOP/s (cpu: measured sgemm rate)
  // The clock the datasheet peak is quoted at, and the clock the matrix units sustain under
  // a long dense matmul load (below it on power-limited parts); 0: not known, taken as equal.
  double peak_clock_hz = 0;
  double sustained_clock_hz = 0;
  // A chip with no sustained clock of its own takes the sustained / peak ratio measured on
  // this chip (compute.sustained_clock_from): no datasheet peak has been shown to hold under
  // load, and leaving such chips at their whole peak would favour every unmeasured vendor
  // over the measured one. "" or a chip with its own sustained clock: not used.
  std::string sustained_clock_from;
  double borrowed_clock_ratio = 0;  // that chip's clock_ratio(), filled when the file is read
  // Where no public figure gives the rate a chip's matrix units sustain, the share of the
  // datasheet peak fitted on that chip's published training runs by launch/calibrate-chips
  // (one parameter per chip; the fit and its residuals are in docs/validation.md). 0: none.
  // Reported as fitted, not measured, in the uncertainty report.
  double fitted_clock_share = 0;
  int64_t hbm_bytes = 0;       // device memory capacity
  double hbm_bytes_per_s = 0;  // device memory bandwidth
  double hbm_efficiency = 1;   // fraction of hbm_bytes_per_s a streaming kernel reaches
  // Host memory link per chip, one direction (activation offload's device<->host copies,
  // parallel/remat_policy.h). 0: not known, offloading on it is a config error.
  double host_link_bytes_per_s = 0;

  std::string fast_fabric;       // "ICI", "NeuronLink", "NVLink", "shm"
  double link_bytes_per_s = 0;   // one link, one direction
  int64_t links = 0;             // chip-to-chip links per chip (torus: 2 per axis)
  int64_t fast_domain_chips = 0; // largest fast domain: TPU pod, trn instance/UltraServer,
                                 // NVLink domain
  int64_t max_slice_chips = 0;   // largest single ICI slice (TPU); = fast domain elsewhere
  double hop_latency_s = 0;      // fast fabric latency per hop / per algorithm step
  // Torus slices (TPU, Trainium): how many axes a slice has, and which axes close into rings.
  // "axis-multiple": an axis wraps when its size is a multiple of wrap_edge; "whole-slice": every
  // axis wraps when all axes are multiples of wrap_edge; "full-edge": an axis wraps only at
  // size wrap_edge; "none". Data, not the chip's name, so a user chip based on one keeps it.
  int64_t torus_dims = 0;
  std::string wraparound;
  int64_t wrap_edge = 0;

  std::string scale_out_fabric;       // "DCN", "EFA", "IB"
  double scale_out_bytes_per_s = 0;   // per chip, one direction
  double scale_out_latency_s = 0;     // per algorithm step

  // Achieved fraction of the datasheet link bandwidth for large collectives.
  double link_efficiency = 0;
  double scale_out_efficiency = 0;

  // Matmul engine geometry for the shape-dependent matmul efficiency (compute_cost.h):
  // edge of the systolic array / MMA tile, and number of engines that work on
  // independent output tiles (GPU SMs, TPU MXUs, Trainium tensor engines).
  int64_t matmul_tile = 128;
  int64_t matmul_tile_k = 0;  // depth of one K step of a tile (0: matmul_tile)
  int64_t matmul_units = 1;

  // Highest fraction of peak the framework's standard flash-attention kernel reaches in the
  // forward pass, where it is below what the GEMM model gives (0 = no extra cap). PyTorch's
  // SDPA flash backend is FlashAttention-2, which uses neither Hopper's wgmma nor
  // Blackwell's tcgen05: ~35% of H100 peak (FlashAttention-3 paper, FA2 baseline).
  // Fraction of the sustained-clock peak (see sustained_clock_hz), 0 = no extra cap.
  double attention_peak_fraction = 0;
  // Non-matrix (vector unit) math rate as a fraction of the matrix peak.
  double vector_peak_fraction = 0;

  // What a running collective takes from the kernels it overlaps: matrix units (GPU SMs
  // running the collective's kernels) and HBM bandwidth (bytes it sends are read, bytes it
  // receives written: comm_memory_traffic x the fabric's achieved bandwidth).
  int64_t comm_units = 0;
  double comm_memory_traffic = 0;

  // Host and device overheads per execution mode (compute_cost.h, ExecutionOverheads):
  // host work per recorded op and device gap per kernel for eager, defer_and_fuse and
  // compiled, and the fixed cost of a collective run as its own unit (separate mode).
  double eager_host_per_op_s = 0, eager_launch_s = 0;
  double defer_host_per_op_s = 0, defer_launch_s = 0;
  double compiled_host_per_op_s = 0, compiled_launch_s = 0;
  double separate_collective_launch_s = 0;
  // Compiled mode folds the elementwise chain right after a matmul into the matmul's kernel
  // (XLA's output fusion). false (GPUs): torch.compile without max-autotune runs matmuls as
  // cuBLAS calls that take no epilogue, so the chain is a fused kernel of its own.
  bool compiled_fuses_matmul_epilogue = true;
  // Compiled mode compiles the whole step (XLA: a jitted train step, PyTorch/XLA's step graph).
  // false (GPUs): TorchTitan applies torch.compile to each transformer block; the embedding,
  // final norm, output projection and loss, FSDP2's casts, gradient clipping and the optimizer
  // step run eagerly (OpDesc::outside_blocks).
  bool compiled_covers_step = true;

  // Per-op overhead on a host CPU (measured for the cpu device; 0 elsewhere):
  // an op that runs a kernel (dispatch, output allocation, autograd node, its backward), and a
  // metadata-only op (view, transpose, reshape: no kernel, no buffer).
  double cpu_op_overhead_s = 0;
  double cpu_view_overhead_s = 0;

  // The framework runs attention as one fused flash kernel on this device (accelerators), so
  // the recorder costs the attention scope as that kernel. false (cpu): libtorch's CPU path
  // really runs the materialized bmm + mask + softmax + bmm, which are costed op by op.
  bool fused_attention = true;
  // The trainer itself runs on this device (the host CPU): its fused kernels
  // (training.fused_kernels, trainer/model/kernels) are what runs, so the recorder keeps each
  // as one op (devices/fused_ops.h). false (accelerators): the device's own framework runs the
  // step, and the composite ATen ops stand for it (fused per execution mode).
  bool host_fused_kernels = false;
  // The matmul rate is a measurement on this chip (the cpu device's calibrated sgemm), not a
  // datasheet figure: its large matmuls count as measured in the uncertainty report.
  bool matmul_rate_measured = false;
  // Measured rates of the trainer's fused kernels on this device, by op name (fused_ops.h):
  // bytes moved per second for the memory-bound kernels, FLOP/s (OpDesc::flops) for attention.
  // Only the cpu device's calibration fills it; ops without a rate use the roofline.
  std::map<std::string, double> kernel_rates;

  // Host CPU only (0 / false elsewhere): the last-level cache a process may use and the
  // bandwidth of a copy that stays in it (measured), and kernels whose math and memory
  // traffic add instead of overlapping (one thread issues both).
  int64_t cache_bytes = 0;
  double cache_bytes_per_s = 0;
  bool serial_kernels = false;
  // Fixed cost per output tile of a CPU sgemm in K-loop steps (see ComputeModel::
  // matmul_efficiency); derived from the measured rate of a K = 16 product. 0 elsewhere.
  double matmul_k_overhead = 0;

  // Power (devices/energy_model.h), watts: the chip's thermal design power and its idle draw,
  // and per chip the rest of its host (CPUs, memory, NICs, fans, board) and its share of the
  // network (switches, optics). 0: not known (no energy figures for the chip).
  double tdp_w = 0, idle_w = 0, host_w_per_chip = 0, network_w_per_chip = 0;
  // Reliability (devices/run_model.h): mean time between job-stopping failures, per chip, of
  // the chip itself (with its HBM), its share of the host, of the network, and of the
  // software stack, seconds (a job of N chips fails N times as often). 0: never.
  double chip_mtbf_s = 0, host_mtbf_s = 0, link_mtbf_s = 0, software_mtbf_s = 0;
  int64_t replace_chips = 1;  // chips swapped together when one fails (its host / instance)

  // Where the figures came from: the data file, and the source of each figure
  // ("compute.peak_bf16_flops" -> "NVIDIA H100 datasheet (dense)").
  std::string file;
  std::map<std::string, std::string> sources;

  // The host CPU the trainer itself runs on (the cpu device): ops run synchronously on the
  // calling thread with measured per-op costs, no runtime reserve. One flag, not the name, so
  // a renamed or user-made host chip behaves the same.
  bool is_host() const { return host_fused_kernels; }
  double link_bidi_per_chip() const { return 2.0 * link_bytes_per_s * static_cast<double>(links); }
  // Sustained over peak clock: the share of the datasheet peak the matrix units can reach.
  double clock_ratio() const {
    if (peak_clock_hz > 0 && sustained_clock_hz > 0) return sustained_clock_hz / peak_clock_hz;
    if (fitted_clock_share > 0) return fitted_clock_share;
    return borrowed_clock_ratio > 0 ? borrowed_clock_ratio : 1.0;
  }
};

// Measured constants of this host for the `cpu` device, written by the calibration command
// as a TOML file of `key = value` lines (optionally under a `[cpu]` table):
//   sgemm_flops = 1.2e11           # per process, FLOP/s, measured under the run's process count
//   mem_bytes_per_s = 1.0e10        # per process, STREAM-like copy bandwidth
//   mpi_latency_s = 2e-6            # small-message one-way latency between ranks
//   mpi_bytes_per_s = 5e9           # large-message bandwidth between two ranks, one direction
//   memory_bytes = 8e9              # memory available per process (optional)
//   op_overhead_s = 5e-6            # eager per-op framework overhead (optional)
//   view_overhead_s = 1e-6          # the same for metadata-only ops (optional; = op_overhead_s)
//   cache_bytes = 1.6e7             # last-level cache per process (optional)
//   cache_bytes_per_s = 4e10        # copy bandwidth of a buffer that fits in it (optional)
//   sgemm_k16_flops = 5e10          # rate of a batched 128x16 @ 16x128 product (optional)
//   cores = 2                       # ranks that fit on the host (optional)
//   threads = 1                     # intra-op threads per rank it was measured with (optional)
//   [kernel_rates]                  # measured rates of the fused kernels (optional, by op name;
//   "titan::rms_norm" = 2e10        # devices/fused_ops.h): bytes/s, FLOP/s for attention
struct CpuCalibration {
  double sgemm_flops = 0;
  double mem_bytes_per_s = 0;
  double mpi_latency_s = 0;
  double mpi_bytes_per_s = 0;
  int64_t memory_bytes = int64_t{8} * 1024 * 1024 * 1024;
  double op_overhead_s = 5e-6;
  double view_overhead_s = 0;  // 0: as op_overhead_s
  int64_t cache_bytes = 0;     // 0: no cache level modelled
  double cache_bytes_per_s = 0;
  double sgemm_k16_flops = 0;  // 0: no small-K loss modelled
  int64_t cores = 1;
  int64_t threads = 0;  // 0: cores
  std::map<std::string, double> kernel_rates;  // ChipSpec::kernel_rates
};

// Parses the calibration text above (TOML); syntax errors, unknown keys and missing required
// keys are config errors naming `origin`, the line and the key.
CpuCalibration parse_cpu_calibration(const std::string& text, const std::string& origin);
CpuCalibration load_cpu_calibration(const std::string& path);

// The folder of the chip data files: $TITAN_CHIP_DIR if set, else <source dir>/devices/chips.
std::string chip_dir();

// Names of every chip in the catalog, in catalog order (devices/chips/catalog.toml:
// accelerators, then "cpu").
const std::vector<std::string>& chip_names();

// Looks a chip up by name (case-insensitive). `chip_file` (optional, a user's data file in
// the format of devices/chips/) adds its chip to the catalog, or replaces the catalog chip of
// the same name. "cpu" needs `cpu` calibration; an unknown name is a config error that lists
// the valid names.
ChipSpec find_chip(const std::string& name, const CpuCalibration* cpu = nullptr,
                   const std::string& chip_file = "");

// The cpu device: the static figures of devices/chips/cpu.toml plus measured constants.
ChipSpec cpu_chip(const CpuCalibration& cal);

}  // namespace titan::devices
