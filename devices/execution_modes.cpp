// Execution modes (eager, defer_and_fuse, compiled): their names and what each costs per op
// and per kernel on a chip. Used by ComputeModel (compute_cost.cpp) and the step simulator.
#include <string>

#include "common/error.h"
#include "devices/compute_cost.h"

namespace titan::devices {

const char* execution_name(ExecutionMode m) {
  switch (m) {
    case ExecutionMode::kEager: return "eager";
    case ExecutionMode::kDeferAndFuse: return "defer_and_fuse";
    case ExecutionMode::kCompiled: return "compiled";
  }
  return "?";
}

ExecutionMode parse_execution(const std::string& s) {
  if (s == "eager") return ExecutionMode::kEager;
  if (s == "defer_and_fuse") return ExecutionMode::kDeferAndFuse;
  if (s == "compiled") return ExecutionMode::kCompiled;
  TITAN_CONFIG_FAIL("unknown execution mode '", s, "' (valid: eager defer_and_fuse compiled)");
}

// Per-op / per-kernel overheads: the chip's [dispatch] figures (estimates from public
// descriptions of each runtime, see devices/chips/_gpu.toml and _xla.toml). cpu: ops run
// synchronously on the calling thread (no run-ahead); the per-op framework cost is measured
// by calibration (op_overhead_s for ops that run a kernel, view_overhead_s for metadata-only
// ops); deferring halves it, compiling removes it but keeps a quarter as a gap per kernel.
ExecutionOverheads execution_overheads(const ChipSpec& chip, ExecutionMode mode) {
  ExecutionOverheads o;
  o.fuse_elementwise = mode != ExecutionMode::kEager;
  o.fuse_epilogue = mode == ExecutionMode::kCompiled && chip.compiled_fuses_matmul_epilogue;
  if (chip.is_host()) {
    o.async = false;
    double per_op = chip.cpu_op_overhead_s > 0 ? chip.cpu_op_overhead_s : 5e-6;
    double per_view = chip.cpu_view_overhead_s > 0 ? chip.cpu_view_overhead_s : per_op;
    const double share = mode == ExecutionMode::kEager ? 1.0
                         : mode == ExecutionMode::kDeferAndFuse ? 0.5
                                                                 : 0.0;
    o.host_per_op_s = per_op * share;
    o.host_per_view_s = per_view * share;
    o.launch_per_kernel_s = mode == ExecutionMode::kCompiled ? per_op / 4 : 0.0;
    return o;
  }
  switch (mode) {
    case ExecutionMode::kEager:
      o.host_per_op_s = chip.eager_host_per_op_s;
      o.launch_per_kernel_s = chip.eager_launch_s;
      break;
    case ExecutionMode::kDeferAndFuse:
      o.host_per_op_s = chip.defer_host_per_op_s;
      o.launch_per_kernel_s = chip.defer_launch_s;
      break;
    case ExecutionMode::kCompiled:
      o.host_per_op_s = chip.compiled_host_per_op_s;
      o.launch_per_kernel_s = chip.compiled_launch_s;
      break;
  }
  o.host_per_view_s = o.host_per_op_s;
  if (mode == ExecutionMode::kCompiled && !chip.compiled_covers_step) {
    o.outside_blocks_eager = true;
    o.outside_host_per_op_s = chip.eager_host_per_op_s;
    o.outside_launch_per_kernel_s = chip.eager_launch_s;
  }
  return o;
}

}  // namespace titan::devices
