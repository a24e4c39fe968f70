// Tensor-parallel gradient finishing, one plan per rank, built from the TP plan's parameters
// (ParallelizedModel, after a pipeline rank dropped other stages' parameters): after backward
// it all-reduces the gradients that are partial sums over tp (per-head QK-norms; every norm
// under sequence parallel) and sums the gradient blocks of KV heads replicated over tp; for the
// global gradient norm it gives the tp-sharded parameters' share (their squares add over tp,
// a block held by several ranks counting once). What it issues is noted for simulation
// (parallel/fsdp_observer.h), so the step itself carries no simulation hooks. Used by the
// Trainer (trainer/step/trainer.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/step/parallelize.h"

namespace titan {

class TpGradientPlan {
 public:
  TpGradientPlan() = default;
  explicit TpGradientPlan(const ParallelizedModel& plan);

  // After backward, before the gradient norm: partial-sum gradients all-reduced over `tp`,
  // replicated KV-head blocks summed over their replicas. fsdp: the step's FSDP (may be null),
  // for the simulation's notes on shard-sized collectives.
  void finish(Communicator& tp, const Fsdp* fsdp) const;

  // This rank's squared gradient norms of the tp-sharded parameters: `here`, every one's
  // square as this rank holds it; `sharded`, each divided by the ranks holding the same block
  // (summed over tp, every block counts once), leaving out `skip` (a tied embedding's copy
  // counted on another stage; null: none).
  struct NormShare {
    double sharded = 0, here = 0;
  };
  NormShare norm_share(const torch::Tensor* skip) const;

  bool shards(const torch::Tensor& t) const;                // t is one of the tp-sharded parameters
  int64_t shard_dim(const c10::TensorImpl* param) const;     // the dim it is split on; -1: not sharded
  int64_t shard_replicas(const c10::TensorImpl* param) const;  // ranks holding its block; 1: not sharded

 private:
  struct Sharded {
    torch::Tensor param;
    int64_t dim = 0, replicas = 1;
  };
  const Sharded* find(const c10::TensorImpl* param) const;
  std::vector<torch::Tensor> partial_;
  std::vector<Sharded> sharded_;
};

}  // namespace titan
