// Runs titan's Trainer for a config under any launcher and writes, from rank 0, every
// step's loss and grad norm plus the full (gathered) final parameters to a safetensors
// file. tests/parallel/loss_parity.py runs it single-process and on several meshes and
// compares the files (loss parity: how a parallelism proves it is correct).
#include <cstdio>
#include <iostream>

#include "common/error.h"
#include "trainer/config/config_loader.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/step/trainer.h"

int main(int argc, char** argv) {
  using namespace titan;
  if (argc < 2) {
    std::cerr << "usage: parity_runner OUT.safetensors [titan-train options]\n";
    return 2;
  }
  try {
    const std::string out = argv[1];
    JobConfig cfg = load_job_config(std::vector<std::string>(argv + 2, argv + argc));
    Trainer trainer(cfg);
    std::vector<double> losses, norms;
    while (trainer.step() < cfg.training.steps) {
      auto r = trainer.train_step();
      losses.push_back(r.loss);
      norms.push_back(r.grad_norm);
    }
    TensorMap tensors{{"losses", torch::tensor(losses, torch::kFloat64)},
                      {"grad_norms", torch::tensor(norms, torch::kFloat64)},
                      {"rank0_param_bytes", torch::tensor({double(trainer.param_bytes())}, torch::kFloat64)},
                      {"rank0_optimizer_bytes",
                       torch::tensor({double(trainer.optimizer().state_bytes())}, torch::kFloat64)}};
    for (auto& [name, full] : trainer.gather_full_parameters()) tensors["param." + name] = full;
    if (trainer.is_writer()) save_safetensors(out, tensors);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "parity_runner: " << e.what() << std::endl;
    return 1;
  }
}
