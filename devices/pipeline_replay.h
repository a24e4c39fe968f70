// Pipeline replay: times the per-rank step lists of a pipeline schedule (compute with
// durations, point-to-point sends and receives) as the runtime executes them, so that
// bubbles, stage imbalance and transfer costs come out of the replay rather than a formula.
// Used by the schedule validator and printer (parallel/pipeline_schedule.h) and by the
// simulator's pipeline replay (trainer/simulate). No torch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace titan::devices {

struct PipeStep {
  enum class Kind { kCompute, kSend, kRecv };
  Kind kind = Kind::kCompute;
  double duration_s = 0;       // compute: its time; send: the transfer time of the message
  int64_t message = -1;        // send / recv: the message id, the same on both sides
  std::vector<int64_t> needs;  // compute: messages that must have arrived before it starts
  std::vector<int64_t> makes;  // compute: messages it delivers when it ends (no send needed)
};

enum class P2PMode {
  // No send or receive steps: a message arrives when the compute that makes it ends.
  kImplicit,
  // Fused collectives: sends and receives run in list order on the rank's communication
  // thread (one in flight at a time); a send and its receive meet once both have started
  // and then take the transfer time. Compute waits only for the receives it needs; the rank
  // ends when its communication thread has drained too.
  kAsync,
  // Fused collectives where a send or receive is posted when the rank's compute thread
  // reaches it (MPI_Isend / MPI_Irecv on the mpi backend, NCCL's batched p2p on GPUs): any
  // number in flight, none waits behind another; a send and its receive meet once both are
  // posted and then take the transfer time. Compute waits only for the receives it needs;
  // the rank ends when its last transfer has.
  kPosted,
  // Separate collectives: the rank's one thread runs each send and receive itself and stops
  // until the pair has met and the transfer has ended (rendezvous).
  kBlocking,
};

struct PipeTiming {
  double start_s = -1, end_s = -1;  // -1: never ran (deadlock)
};

struct PipelineReplayResult {
  bool deadlock = false;
  // Where each unfinished rank stopped: (rank, index of the step it cannot run).
  std::vector<std::pair<int, size_t>> stuck;
  std::vector<std::vector<PipeTiming>> timing;  // per rank, per step
  std::vector<double> rank_end_s;               // when each rank finished
  std::vector<double> compute_busy_s;           // per rank: sum of its compute durations
  double makespan_s = 0;
  // 1 - sum(compute busy) / (ranks x makespan): the share of rank-time spent not computing
  // (pipeline fill and drain, imbalance, exposed transfers).
  double bubble_fraction = 0;
};

// Replays the lists. Every message id is made by exactly one step: a compute's `makes`
// (delivered when it ends; same-rank hand-offs, or everything in kImplicit) or a send, which
// then has exactly one receive.
// A step that can never run (a cycle through sends, receives and needs) is reported as a
// deadlock with where every unfinished rank stopped, not thrown.
PipelineReplayResult replay_pipeline(const std::vector<std::vector<PipeStep>>& ranks, P2PMode mode);

}  // namespace titan::devices
