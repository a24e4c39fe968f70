// Which recorded ops belong to the model's transformer blocks (devices::OpDesc::outside_blocks):
// the record the trace recorder (trace_recorder.cpp) keeps of kBlockScope's forward calls, of the
// autograd nodes made inside them, and of the engine's own ops between those nodes.
#pragma once

#include <cstdint>
#include <map>
#include <utility>

namespace titan::block_membership {

// The interval of `intervals` (keyed by (thread, first sequence number); `hi(value)` its end,
// exclusive) that holds sequence number `seq` of `thread`, or intervals.end(). Autograd numbers
// the nodes a thread makes in order, so a forward scope's nodes are the numbers it saw pass.
template <class Map, class Hi>
typename Map::iterator interval_holding(Map& intervals, uint64_t thread, int64_t seq, Hi hi) {
  auto it = intervals.upper_bound({thread, seq});
  if (it == intervals.begin()) return intervals.end();
  --it;
  return it->first.first == thread && seq < hi(it->second) ? it : intervals.end();
}

// A new recording: forgets every block and what any thread noted of an earlier one.
void reset();
// A kBlockScope call on `thread` made the nodes numbered [lo, hi).
void block_closed(uint64_t thread, int64_t lo, int64_t hi);
// Node `seq`, made on `forward_thread`, was made inside a block.
bool node_made_in_block(uint64_t forward_thread, int64_t seq);

// The autograd engine's own ops between two nodes (summing the gradients a tensor receives from
// its uses, reducing a gradient to a broadcast input's shape) run in no node's frame; they belong
// where the node whose outputs they take does. node_returned notes, for this thread, the last
// node to return: the serial of the frame it ran in (0: none) and whether it was a block's.
void node_returned(uint64_t enclosing_frame, bool in_block);
// An op (not a node) entering in frame `enclosing_frame` while a backward pass runs on this
// thread, right after a node returned in that frame: true, with that node's membership.
bool engine_op_after_node(uint64_t enclosing_frame, bool* in_block);

}  // namespace titan::block_membership
