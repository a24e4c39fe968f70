// Block membership of recorded ops (see block_membership.h).
#include "trainer/simulate/block_membership.h"

#include <torch/csrc/autograd/graph_task.h>

#include <atomic>
#include <mutex>

namespace titan::block_membership {
namespace {

std::mutex mu;  // guards `blocks`
// kBlockScope's forward calls: on thread `first`, the nodes numbered [second, value).
std::map<std::pair<uint64_t, int64_t>, int64_t> blocks;
std::atomic<uint64_t> recordings{0};  // resets so far: what a thread noted before is stale

thread_local struct {
  uint64_t recording = 0;
  uint64_t enclosing = 0;
  bool in_block = false;
} last_node;

}  // namespace

void reset() {
  std::lock_guard<std::mutex> lock(mu);
  blocks.clear();
  ++recordings;
}

void block_closed(uint64_t thread, int64_t lo, int64_t hi) {
  if (hi <= lo) return;
  std::lock_guard<std::mutex> lock(mu);
  blocks[{thread, lo}] = hi;
}

bool node_made_in_block(uint64_t forward_thread, int64_t seq) {
  std::lock_guard<std::mutex> lock(mu);
  return interval_holding(blocks, forward_thread, seq, [](int64_t hi) { return hi; }) != blocks.end();
}

void node_returned(uint64_t enclosing_frame, bool in_block) {
  last_node = {recordings.load(), enclosing_frame, in_block};
}

bool engine_op_after_node(uint64_t enclosing_frame, bool* in_block) {
  if (last_node.recording != recordings.load() || last_node.enclosing != enclosing_frame) return false;
  if (torch::autograd::get_current_graph_task_exec_info() == nullptr) return false;  // no backward running
  *in_block = last_node.in_block;
  return true;
}

}  // namespace titan::block_membership
