// The training loop: config -> tokenizer and data -> model -> steps with metrics. Used by main
// and by tests that train a few steps in-process.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "trainer/config/job_config.h"

namespace titan {

struct TrainResult {
  std::vector<double> losses;  // global mean loss per step
  std::vector<double> grad_norms;
  std::map<std::string, torch::Tensor> final_params;  // this rank's (shards under FSDP)
  int stop_signal = 0;  // SIGINT / SIGTERM that stopped the loop early (stop_signals.h), else 0
};

// Runs cfg.training.steps optimizer steps; throws titan::Error on bad input.
TrainResult train(const JobConfig& cfg);

}  // namespace titan
