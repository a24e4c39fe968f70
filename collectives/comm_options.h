// CommOptions and ReduceOp: the knobs of the collective layer. The trainer maps its [comm]
// config section onto CommOptions; every backend and the DeviceMesh read them.
#pragma once

#include <string>

#include "common/collective_mode.h"

namespace titan {

struct CommOptions {
  // Key into the backend registry (collectives/backend.h): "mpi" (Open MPI), "gloo" (gloo
  // library over TCP), "sim" (records only). A name, not an enum: backends register
  // themselves, and the trainer's config has already checked its choice.
  std::string backend = "mpi";
  // kFused: list ops are coalesced into flat buckets and run asynchronously on a progress
  // thread. kSeparate: one blocking collective per tensor on the calling thread.
  CollectiveMode collective_mode = CollectiveMode::kFused;
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
