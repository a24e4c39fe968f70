// The training loop: config -> tokenizer and data -> model -> steps with metrics. Used by main
// and by tests that train a few steps in-process.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "trainer/job_config.h"

namespace titan {

struct TrainResult {
  std::vector<double> losses;  // global mean loss per step
  std::vector<double> grad_norms;
  std::map<std::string, torch::Tensor> final_params;  // this rank's (shards under FSDP)
};

// Runs cfg.training.steps optimizer steps; throws titan::Error on bad input.
TrainResult train(const JobConfig& cfg);

// Intra-op threads for this rank: training.threads, or the host's cores divided by the ranks
// that mpirun placed on this host.
int choose_threads(const JobConfig& cfg);

// The corpus shipped with the repository (training.dataset_path = "").
std::string default_corpus_path();

}  // namespace titan
