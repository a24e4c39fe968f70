// CommOptions and ReduceOp: the knobs of the collective layer. The trainer maps its [comm]
// config section onto CommOptions; every backend and the DeviceMesh read them.
#pragma once

#include <string>

namespace titan {

struct CommOptions {
  // "mpi" (default, Open MPI), "gloo" (gloo library over TCP), later "sim" (records only).
  std::string backend = "mpi";
  // "fused": list ops are coalesced into flat buckets and run asynchronously on a progress
  // thread. "separate": one blocking collective per tensor on the calling thread.
  std::string collective_mode = "fused";
  // Largest flat bucket the fused mode builds (a single larger tensor gets its own bucket).
  double bucket_cap_mb = 25;
  // Time allowed to set up the job and each new group (gloo rendezvous, group creation).
  double init_timeout_seconds = 300;
  // A collective that runs longer than this aborts the whole job with a message.
  double train_timeout_seconds = 100;
  // gloo only: folder for the file store. Empty: /tmp/titan-gloo-<job id of the launcher>.
  // Must be on a shared file system when ranks run on several hosts.
  std::string rendezvous_dir;
};

// Throws a config titan::Error naming the bad field when a value is out of range.
void validate(const CommOptions& options);

bool is_fused(const CommOptions& options);

// kAvg divides the sum by the group size (integers: truncating division).
enum class ReduceOp { kSum, kAvg, kMax };

const char* reduce_op_name(ReduceOp op);

}  // namespace titan
