// Pipeline schedules as data: for every pipeline rank, the ordered list of actions (forward,
// backward or its input-gradient and weight-gradient halves, sends and receives of
// activations and gradients, FSDP gradient reduction) that the runtime executes
// (parallel/pipeline_runtime.h) and the simulator replays. Built by name (GPipe, 1F1B,
// Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble) or loaded from a CSV file,
// validated (order, matching sends and receives, no deadlock) and printable as a timeline.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "devices/pipeline_replay.h"

namespace titan {

enum class PipeOp {
  kForward,         // F: stage forward of one micro-batch
  kBackward,        // B: full backward (input and weight gradients)
  kBackwardInput,   // I: input gradient only (zero-bubble split)
  kBackwardWeight,  // W: the weight gradients deferred by I
  kSendF,           // SEND_F: this stage's output activation to stage + 1
  kRecvF,           // RECV_F: this stage's input activation from stage - 1
  kSendB,           // SEND_B: this stage's input gradient to stage - 1
  kRecvB,           // RECV_B: this stage's output gradient from stage + 1
  kUnshard,         // UNSHARD: FSDP gathers the stage's parameters
  kReshard,         // RESHARD: FSDP frees them
  kReduceGrad,      // REDUCE_GRAD: FSDP reduces the stage's accumulated gradients
};

struct PipeAction {
  PipeOp op = PipeOp::kForward;
  int stage = 0;        // global stage index
  int microbatch = -1;  // -1 for UNSHARD / RESHARD / REDUCE_GRAD
  bool operator==(const PipeAction& o) const {
    return op == o.op && stage == o.stage && microbatch == o.microbatch;
  }
  bool compute() const;  // F, B, I or W
  bool p2p() const;      // a send or a receive
  // "2F0", "1I3", "0SEND_F1", "3RECV_B2", "1REDUCE_GRAD".
  std::string to_string() const;
};

// Parses to_string()'s form; a config error names `where` (e.g. "schedule.csv:2") otherwise.
PipeAction parse_pipe_action(const std::string& text, const std::string& where);

struct PipeSchedule {
  std::string name;
  int num_ranks = 1;
  int num_stages = 1;
  int num_microbatches = 1;
  std::vector<int> stage_rank;                 // the pipeline rank holding each stage
  std::vector<std::vector<PipeAction>> ranks;  // per pipeline rank, in execution order

  std::vector<int> stages_of(int rank) const;  // ascending
  bool has_p2p() const;                        // sends / receives present
  bool split_backward() const;                 // uses I and W
};

// The named schedules: GPipe 1F1B Interleaved1F1B InterleavedZeroBubble ZBVZeroBubble.
const std::vector<std::string>& pipeline_schedule_names();
// Whether a named schedule runs one stage per rank (GPipe, 1F1B) or several.
bool single_stage_schedule(const std::string& name);

// Builds a named schedule over `num_stages` stages (GPipe and 1F1B: one per rank;
// Interleaved*: a multiple of the ranks, placed in a loop, stage s on rank s % ranks;
// ZBVZeroBubble: two per rank in a V, rank r holding stages r and 2 x ranks - 1 - r), with
// sends and receives inserted (insert_p2p) and, when `reduce_grad`, one REDUCE_GRAD per
// stage after its last backward. Config errors for an unknown name, a stage count the
// schedule cannot use, or fewer micro-batches than it needs. The result is validated.
PipeSchedule make_pipeline_schedule(const std::string& name, int num_ranks, int num_stages,
                                        int num_microbatches, bool reduce_grad = false);

// Loads a custom schedule: one line per pipeline rank, actions separated by commas (empty
// cells and blank lines after the last rank are ignored, '#' starts a comment). Stages and
// their ranks are read from the actions. Without sends and receives they are inserted;
// with them, they are validated as given. Config errors name file:line.
PipeSchedule load_pipeline_schedule_csv(const std::string& path, int num_ranks, int num_microbatches);

// Given compute actions only (F, B, I, W, REDUCE_GRAD...), inserts the sends and receives
// between ranks: each send right after the action that makes its tensor, each receive where
// a unit-cost replay says the tensor arrives, all of them in one global order, so that the
// lists cannot deadlock even when every send and receive blocks until its peer meets it.
void insert_p2p(PipeSchedule& schedule);

// Every micro-batch's F precedes its B (or I, then W) on its stage, each exactly once, on
// the stage's rank; every send has its receive on the peer's rank; FSDP actions are well
// placed; the lists do not deadlock when sends and receives block (rendezvous). Config
// errors name the schedule, rank and action. compute_only: the order checks alone, for lists
// whose sends and receives are still to be inserted.
void validate_pipeline_schedule(const PipeSchedule& schedule, bool compute_only = false);

// Unit costs of the text timeline and of schedule construction: F 1, B 2, I 1, W 1.
double unit_cost(PipeOp op);

// The schedule as replay steps, with `cost(action)` seconds per compute action and
// `transfer(action)` seconds per send; kImplicit drops the sends and receives.
std::vector<std::vector<devices::PipeStep>> pipeline_steps(
    const PipeSchedule& schedule, devices::P2PMode mode,
    const std::function<double(const PipeAction&)>& cost,
    const std::function<double(const PipeAction&)>& transfer);

// A text timeline: one row per rank, one column per unit of time (unit costs, free
// transfers), each compute action in the cells it occupies, '.' where the rank idles; then
// the bubble fraction and every rank's full action list.
std::string format_pipeline_schedule(const PipeSchedule& schedule);

// Most micro-batches whose activations a rank holds at once (forwards done minus backwards,
// or weight-gradient halves, done), per rank, counted per stage-micro-batch pair.
std::vector<int> peak_in_flight(const PipeSchedule& schedule);

}  // namespace titan
