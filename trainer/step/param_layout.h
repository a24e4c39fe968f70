// Where each rank's piece of every parameter lies in the global tensor, read from the plans
// that placed it (TP's split dim, FSDP's shard), and the two moves between a rank's piece
// and the full value. Used by checkpoints (save, load, Hugging Face interop) and by
// Trainer::gather_full_parameters (parity tests).
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

namespace titan {

class Trainer;

// Parameter i's piece on this rank: a box of the global tensor (the tensor-parallel block
// this rank holds; the whole tensor without TP or when replicated over tp) and a range of
// that box's row-major flattening (the FSDP shard; the whole box without FSDP).
struct ParamLayout {
  std::string name;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> box_offset, box_shape;
  int64_t tp_dim = -1;      // the dim split over tp, -1 when replicated over tp (or tp == 1)
  int64_t flat_offset = 0;  // FSDP: where this rank's shard starts in the box's flattening
  int64_t length = 0;       // elements of real data in this rank's piece (padding excluded)
  bool writes = true;       // false on tp ranks > 0 for tensors replicated over tp (one copy on disk)
  bool ep_split = false;    // an MoE expert weight split on dim 0 over the ep group
};

// One entry per optimizer parameter, in order.
std::vector<ParamLayout> param_layout(Trainer& trainer);
// Whether this rank's tensors go to disk: replicas (dp_replicate > 0) hold copies and skip.
bool writes_tensors(Trainer& trainer);
// The full value of parameter i (a collective over the FSDP shard group and the tp group).
torch::Tensor full_parameter(Trainer& trainer, size_t i, const ParamLayout& layout);
// Copies this rank's piece (box, then flat range) of the global tensor `full` into parameter i.
void assign_from_full(Trainer& trainer, size_t i, const ParamLayout& layout, const torch::Tensor& full);

}  // namespace titan
