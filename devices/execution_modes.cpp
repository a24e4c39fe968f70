// Execution modes (eager, defer_and_fuse, compiled): their names, what each costs per op and
// per kernel on a chip, and how each lowers the recorded ops to kernels (fusion). Used by
// ComputeModel (compute_cost.cpp) and the step simulator.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "devices/compute_cost.h"

namespace titan::devices {
namespace {

bool fusable(OpKind k) {
  return k == OpKind::kElementwise || k == OpKind::kReduction || k == OpKind::kView;
}

// The storage ids a fused chain has read so far: a list while short, and an open-addressing
// table beside it once long (a long chain, such as an optimizer step over many parameters,
// reads many, and a search of the list per read made it quadratic). One per thread: a
// replay asks for thousands of chains.
class SeenIds {
 public:
  void clear() {
    list_.clear();
    if (in_table_) std::fill(table_.begin(), table_.end(), kEmpty);  // as long as that chain was
    in_table_ = false;
  }
  // Adds id; false if it was there already.
  bool insert(int64_t id) {
    if (!in_table_ || id == kEmpty) {
      if (std::find(list_.begin(), list_.end(), id) != list_.end()) return false;
      list_.push_back(id);
      if (!in_table_ && list_.size() == kLinear) rehash(4 * kLinear), in_table_ = true;
      return true;
    }
    if (!place(id)) return false;
    list_.push_back(id);
    if (2 * list_.size() > table_.size()) rehash(2 * table_.size());
    return true;
  }

 private:
  static constexpr size_t kLinear = 16;
  static constexpr int64_t kEmpty = std::numeric_limits<int64_t>::min();
  bool place(int64_t id) {  // table_ is at most half full
    const size_t mask = table_.size() - 1;
    for (size_t h = static_cast<size_t>(static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull >> 20) & mask;;
         h = (h + 1) & mask) {
      if (table_[h] == id) return false;
      if (table_[h] == kEmpty) {
        table_[h] = id;
        return true;
      }
    }
  }
  void rehash(size_t size) {
    table_.assign(size, kEmpty);
    for (int64_t id : list_)
      if (id != kEmpty) place(id);
  }
  std::vector<int64_t> list_;
  std::vector<int64_t> table_;  // a power of two in size; all kEmpty unless in_table_
  bool in_table_ = false;
};

}  // namespace

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

bool compiles_whole_step(const ChipSpec& chip, ExecutionMode mode) {
  return mode == ExecutionMode::kCompiled && chip.compiled_covers_step && !chip.is_host();
}

double ChainTraffic::bytes(const std::vector<const OpDesc*>& ops) const {
  double r = 0, w = 0;
  for (const At& a : reads) r += static_cast<double>(ops[a.op]->reads[a.slot].bytes);
  for (const At& a : writes) w += static_cast<double>(ops[a.op]->writes[a.slot].bytes);
  return r + w;
}

// HBM bytes of ops[i, j) run as one fused kernel (`mm`: the matmul whose epilogue it is).
// With the recorded data flow: a tensor is read from HBM once if no op of the kernel wrote
// it (and not from the epilogue's accumulators), and written if an op after the kernel reads
// it (saved for backward, the residual stream) or none in the step does (parameters, the
// optimizer's state). Without it (synthetic traces), each op is assumed to consume its
// predecessor's output in registers and only the chain's last output is written:
//   bytes = read_1 + sum_{j>1} max(0, read_j - written_{j-1}) + written_last
double ComputeModel::fused_bytes(const std::vector<const OpDesc*>& ops, size_t i, size_t j,
                                 const OpDesc* mm, ChainTraffic* traffic) const {
  // The data flow's sums in one pass over the ops, dropped at the first op without it: a
  // first pass to check that every op has it walked the chain's scattered ops twice.
  double reads = 0, writes = 0;
  bool flow = true;
  {
    const int64_t first = ops[i]->index, last = ops[j - 1]->index;
    thread_local SeenIds seen;
    seen.clear();
    for (size_t x = i; x < j; ++x) {
      const OpDesc& f = *ops[x];
      if (f.kind == OpKind::kView) continue;
      if (f.index < 0 || (f.reads.empty() && f.writes.empty())) {
        flow = false;
        break;
      }
      for (size_t k = 0; k < f.reads.size(); ++k) {
        const TensorUse& u = f.reads[k];
        if ((u.flow >= first && u.flow <= last) || (mm && u.flow == mm->index)) continue;
        if (!seen.insert(u.id)) continue;
        reads += static_cast<double>(u.bytes);
        if (traffic) traffic->reads.push_back({static_cast<uint32_t>(x), static_cast<uint32_t>(k)});
      }
      for (size_t k = 0; k < f.writes.size(); ++k) {
        const TensorUse& u = f.writes[k];
        if (u.flow >= 0 && u.flow <= last) continue;
        writes += static_cast<double>(u.bytes);
        if (traffic) traffic->writes.push_back({static_cast<uint32_t>(x), static_cast<uint32_t>(k)});
      }
    }
  }
  if (traffic) traffic->flow = flow;
  if (flow) return reads + writes;
  reads = 0, writes = 0;
  int64_t prev_written = -1;
  for (size_t x = i; x < j; ++x) {
    const OpDesc& f = *ops[x];
    if (f.kind == OpKind::kView) continue;
    reads += prev_written < 0 ? static_cast<double>(f.bytes_read)
                              : std::max<double>(0, static_cast<double>(f.bytes_read - prev_written));
    prev_written = f.bytes_written;
    writes = static_cast<double>(f.bytes_written);
  }
  if (mm) reads = std::max(0.0, reads - static_cast<double>(mm->bytes_written));
  return reads + writes;
}

std::vector<Kernel> ComputeModel::lower(const std::vector<OpDesc>& ops) const {
  std::vector<const OpDesc*> at;
  for (const OpDesc& op : ops) at.push_back(&op);
  std::vector<Kernel> out;
  lower(at, &out);
  return out;
}

void ComputeModel::lower(const std::vector<const OpDesc*>& ops, std::vector<Kernel>* kernels) const {
  std::vector<Kernel>& out = *kernels;
  out.clear();
  out.reserve(ops.size());  // at most a kernel per op: no regrowth, and each kernel is built in place
  for (size_t i = 0; i < ops.size();) i = lower_at(ops, i, &out.emplace_back());
}

size_t ComputeModel::lower_at(const std::vector<const OpDesc*>& ops, size_t i, Kernel* kernel,
                              ChainTraffic* traffic) const {
  // The categories interned once: a kernel's category is then a pointer (it was a strlen and
  // a string copy per kernel, and the timeline compared it with its last category's text).
  static const InternedName kCategory[] = {op_kind_name(OpKind::kMatmul),      op_kind_name(OpKind::kAttention),
                                           op_kind_name(OpKind::kElementwise), op_kind_name(OpKind::kReduction),
                                           op_kind_name(OpKind::kOther),       op_kind_name(OpKind::kView),
                                           op_kind_name(OpKind::kFused)};
  static_assert(static_cast<int>(OpKind::kFused) == 6, "kCategory lists every OpKind in order");
  const ExecutionOverheads& o = overheads_;
  Kernel& k = *kernel;
  k = Kernel{};
  // An op outside the blocks of a compiler that covers only them runs as eager runs it.
  auto eager_here = [&](const OpDesc& op) { return o.outside_blocks_eager && op.outside_blocks; };
  auto fuses = [&](const OpDesc& op) { return o.fuse_elementwise && fusable(op.kind) && !eager_here(op); };
  const OpDesc& op = *ops[i];
  if (traffic) traffic->chain = false;
  if (!fuses(op)) {
    const bool eager = eager_here(op);
    const double host_s = eager ? o.outside_host_per_op_s
                          : op.kind == OpKind::kView ? o.host_per_view_s : o.host_per_op_s;
    k.category = kCategory[static_cast<int>(op.kind)];
    const KernelTime kt = kernel_time(op);
    k.compute_s = kt.compute_s;
    k.memory_s = kt.memory_s;
    k.exec_s = combine(kt.compute_s, kt.memory_s);
    k.basis = basis_of(op, kt);
    k.host_s = host_s;
    k.ops = 1;
    k.lead = &op.name.str();
    if (op.kind == OpKind::kAttention) k.flops = attention_flops(op.attn);
    else if (op.kind == OpKind::kMatmul && op.mm.m > 0)
      k.flops = 2.0 * static_cast<double>(op.mm.batch) * op.mm.m * op.mm.n * op.mm.k;
    else k.flops = op.flops;
    k.bytes = op.bytes_read + op.bytes_written;
    // Views launch nothing on the device; eager still dispatches them on the host.
    k.launch_s = op.kind == OpKind::kView ? 0 : eager ? o.outside_launch_per_kernel_s : o.launch_per_kernel_s;
    return i + 1;
  }
  // A chain of fusable ops becomes one kernel.
  k.category = kCategory[static_cast<int>(OpKind::kElementwise)];
  double flops = 0;
  int64_t real_ops = 0;
  bool has_reduction = false;
  size_t j = i;
  for (; j < ops.size() && fuses(*ops[j]); ++j) {
    const OpDesc& f = *ops[j];
    k.host_s += f.kind == OpKind::kView ? o.host_per_view_s : o.host_per_op_s;
    ++k.ops;
    if (f.kind == OpKind::kView) continue;
    if (!k.lead) k.lead = &f.name.str();
    ++real_ops;
    has_reduction |= f.kind == OpKind::kReduction;
    flops += f.flops;
  }
  if (has_reduction) k.category = kCategory[static_cast<int>(OpKind::kReduction)];
  // Epilogue fusion (compiled): the chain right after a matmul reads its output from the
  // matmul's accumulators, not from HBM, and needs no launch of its own.
  const OpDesc* mm = epilogue_of(ops, i);
  if (traffic) traffic->reads.clear(), traffic->writes.clear(), traffic->chain = true;
  finish_chain(&k, flops, fused_bytes(ops, i, j, mm, traffic), real_ops, mm != nullptr);
  return j;
}

const OpDesc* ComputeModel::epilogue_of(const std::vector<const OpDesc*>& ops, size_t i) const {
  return overheads_.fuse_epilogue && i > 0 && ops[i - 1]->kind == OpKind::kMatmul ? ops[i - 1] : nullptr;
}

void ComputeModel::finish_chain(Kernel* kernel, double flops, double bytes, int64_t real_ops, bool epilogue) const {
  Kernel& k = *kernel;
  k.compute_s = compute_s(flops, chip_.vector_peak_fraction);
  k.memory_s = memory_s(bytes);
  k.exec_s = combine(k.compute_s, k.memory_s);
  k.basis = real_ops == 0 ? CostBasis::kNone
            : k.memory_s >= k.compute_s ? CostBasis::kMemory : CostBasis::kVector;
  k.bytes = static_cast<int64_t>(bytes);
  k.flops = flops;
  k.launch_s = (real_ops == 0 || epilogue) ? 0 : overheads_.launch_per_kernel_s;
  k.chain = real_ops > 1;
}

void ComputeModel::recost_chain(const std::vector<const OpDesc*>& ops, size_t i, size_t j,
                                const ChainTraffic& traffic, Kernel* kernel) const {
  double flops = 0;
  int64_t real_ops = 0;
  for (size_t x = i; x < j; ++x) {
    if (ops[x]->kind == OpKind::kView) continue;
    ++real_ops;
    flops += ops[x]->flops;
  }
  const OpDesc* mm = epilogue_of(ops, i);
  finish_chain(kernel, flops, traffic.flow ? traffic.bytes(ops) : fused_bytes(ops, i, j, mm), real_ops,
               mm != nullptr);
}

}  // namespace titan::devices
