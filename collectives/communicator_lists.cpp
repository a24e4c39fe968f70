// Communicator's list ops: one collective per tensor (separate mode) or one per flat bucket
// of tensors (fused mode, see fusion.h).
#include <algorithm>
#include <string>

#include "collectives/communicator.h"
#include "collectives/contiguous.h"
#include "collectives/fusion.h"
#include "common/error.h"

namespace titan {

namespace {

int64_t cap_bytes(const CommOptions& o) {
  return std::max<int64_t>(1, static_cast<int64_t>(o.bucket_cap_mb * 1024 * 1024));
}

}  // namespace

std::vector<int64_t> Communicator::check_pairs(const char* op, const std::vector<at::Tensor>& outs,
                                               const std::vector<at::Tensor>& ins,
                                               std::vector<at::ScalarType>* dtypes) const {
  const bool gathers = std::string(op) == "all_gather";  // else reduce_scatter
  std::vector<int64_t> bytes;
  for (size_t i = 0; i < ins.size(); ++i) {
    const at::Tensor& big = gathers ? outs[i] : ins[i];
    const at::Tensor& small = gathers ? ins[i] : outs[i];
    for (const at::Tensor* t : {&big, &small})
      gathers ? check_tensor(op, *t) : check_reducible(op, *t);
    TITAN_CHECK(big.scalar_type() == small.scalar_type() && big.numel() == size() * small.numel(),
                op, " on group '", name_, "': tensor ", i, ": ", gathers ? "out " : "in ",
                big.numel(), " ", big.scalar_type(), " must be group size ", size(),
                gathers ? " x in " : " x out ", small.numel(), " ", small.scalar_type());
    bytes.push_back(nbytes(big));
    dtypes->push_back(big.scalar_type());
  }
  return bytes;
}

WorkPtr Communicator::all_reduce(const std::vector<at::Tensor>& ts, ReduceOp op) {
  for (const auto& t : ts) check_reducible("all_reduce", t);
  if (ts.empty() || size() == 1) return Work::completed();
  if (!is_fused(options_)) {
    for (const auto& t : ts) all_reduce(t, op)->wait();  // blocking: complete already
    return Work::completed();
  }
  std::vector<int64_t> bytes;
  std::vector<at::ScalarType> dtypes;
  for (const auto& t : ts) {
    bytes.push_back(nbytes(t));
    dtypes.push_back(t.scalar_type());
  }
  auto buckets = plan_buckets(bytes, dtypes, cap_bytes(options_));
  int64_t total = 0;
  for (auto b : bytes) total += b;
  return submit(make_info("all_reduce", total), [this, ts, op, buckets] {
    for (const auto& bucket : buckets) {
      if (bucket.size() == 1) {  // nothing to coalesce: no packing copies
        with_contiguous(ts[bucket[0]], [&](const at::Tensor& c) {
          current_bytes_ = nbytes(c);
          run_all_reduce(c, op);
        });
        continue;
      }
      int64_t numel = 0;
      for (auto i : bucket) numel += ts[i].numel();
      at::Tensor flat = at::empty({numel}, ts[bucket[0]].options());
      int64_t off = 0;
      for (auto i : bucket) {
        flat.narrow(0, off, ts[i].numel()).copy_(ts[i].reshape({-1}));
        off += ts[i].numel();
      }
      current_bytes_ = nbytes(flat);
      run_all_reduce(flat, op);
      off = 0;
      for (auto i : bucket) {
        ts[i].copy_(flat.narrow(0, off, ts[i].numel()).view(ts[i].sizes()));
        off += ts[i].numel();
      }
    }
  });
}

WorkPtr Communicator::all_gather(const std::vector<at::Tensor>& outs,
                                 const std::vector<at::Tensor>& ins) {
  TITAN_CHECK(outs.size() == ins.size(), "all_gather on group '", name_, "': ", outs.size(),
              " outputs for ", ins.size(), " inputs");
  if (!is_fused(options_) || size() == 1) {
    for (size_t i = 0; i < ins.size(); ++i) all_gather(outs[i], ins[i])->wait();
    return Work::completed();
  }
  std::vector<at::ScalarType> dtypes;
  const std::vector<int64_t> bytes = check_pairs("all_gather", outs, ins, &dtypes);
  if (ins.empty()) return Work::completed();
  int64_t total = 0;
  for (auto b : bytes) total += b;
  auto buckets = plan_buckets(bytes, dtypes, cap_bytes(options_));
  const int64_t n = size();
  return submit(make_info("all_gather", total), [this, outs, ins, buckets, n] {
    for (const auto& bucket : buckets) {
      if (bucket.size() == 1) {
        const at::Tensor in = ins[bucket[0]].contiguous();
        with_contiguous(outs[bucket[0]], [&](const at::Tensor& out) {
          current_bytes_ = nbytes(out);
          run_all_gather(out, in);
        });
        continue;
      }
      int64_t m = 0;  // elements per rank in this bucket
      for (auto i : bucket) m += ins[i].numel();
      auto opts = ins[bucket[0]].options();
      at::Tensor flat_in = at::empty({m}, opts);
      int64_t off = 0;
      for (auto i : bucket) {
        flat_in.narrow(0, off, ins[i].numel()).copy_(ins[i].reshape({-1}));
        off += ins[i].numel();
      }
      at::Tensor flat_out = at::empty({n * m}, opts);
      current_bytes_ = nbytes(flat_out);
      run_all_gather(flat_out, flat_in);
      at::Tensor by_rank = flat_out.view({n, m});
      off = 0;
      for (auto i : bucket) {
        const int64_t k = ins[i].numel();
        outs[i].copy_(by_rank.narrow(1, off, k).reshape(outs[i].sizes()));
        off += k;
      }
    }
  });
}

WorkPtr Communicator::reduce_scatter(const std::vector<at::Tensor>& outs,
                                     const std::vector<at::Tensor>& ins, ReduceOp op) {
  TITAN_CHECK(outs.size() == ins.size(), "reduce_scatter on group '", name_, "': ", outs.size(),
              " outputs for ", ins.size(), " inputs");
  if (!is_fused(options_) || size() == 1) {
    for (size_t i = 0; i < ins.size(); ++i) reduce_scatter(outs[i], ins[i], op)->wait();
    return Work::completed();
  }
  std::vector<at::ScalarType> dtypes;
  const std::vector<int64_t> bytes = check_pairs("reduce_scatter", outs, ins, &dtypes);
  if (ins.empty()) return Work::completed();
  int64_t total = 0;
  for (auto b : bytes) total += b;
  auto buckets = plan_buckets(bytes, dtypes, cap_bytes(options_));
  const int64_t n = size();
  return submit(make_info("reduce_scatter", total), [this, outs, ins, buckets, n, op] {
    for (const auto& bucket : buckets) {
      if (bucket.size() == 1) {
        const at::Tensor in = ins[bucket[0]].contiguous();
        with_contiguous(outs[bucket[0]], [&](const at::Tensor& out) {
          current_bytes_ = nbytes(in);
          run_reduce_scatter(out, in, op);
        });
        continue;
      }
      int64_t m = 0;  // output elements per rank in this bucket
      for (auto i : bucket) m += outs[i].numel();
      auto opts = ins[bucket[0]].options();
      at::Tensor flat_in = at::empty({n * m}, opts);
      at::Tensor by_rank = flat_in.view({n, m});
      int64_t off = 0;
      for (auto i : bucket) {
        const int64_t k = outs[i].numel();
        by_rank.narrow(1, off, k).copy_(ins[i].reshape({n, k}));
        off += k;
      }
      at::Tensor flat_out = at::empty({m}, opts);
      current_bytes_ = nbytes(flat_in);
      run_reduce_scatter(flat_out, flat_in, op);
      off = 0;
      for (auto i : bucket) {
        outs[i].copy_(flat_out.narrow(0, off, outs[i].numel()).view(outs[i].sizes()));
        off += outs[i].numel();
      }
    }
  });
}

}  // namespace titan
