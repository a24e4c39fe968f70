// libFuzzer target: the checkpoint metadata reader. An input that starts with '{' is a step
// folder's COMPLETE marker (parse_complete_marker, step_folders.h); any other input is one rank
// file (HDF5), opened by CheckpointReader as rank 0 of a 1-rank checkpoint: its root
// attributes (format, version, rank, mesh, model args, state keys), the index of its tensor
// pieces with their box and checksum checks, every tensor read in full (block checksums) and
// its RNG state. Any input must load or end in a titan::Error; another exception, a crash, a
// hang or a sanitizer report is a finding. HDF5 and libtorch are Debian's, not instrumented:
// coverage guides the search through titan's code only. Built and run by launch/fuzz.
//
// TITAN_FUZZ_WRITE_SEEDS=<folder>: writes the seed corpus (a small rank file written by
// titan's own writer, and its COMPLETE marker) into the folder and exits; the seeds in
// tests/trainer/fuzz/corpus/checkpoint/ were made so.
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <torch/torch.h>

#include "common/error.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/step_folders.h"

namespace {

std::string g_dir;  // this fuzzing process's scratch step folder

void write_seeds(const std::string& out) {
  std::filesystem::create_directories(out);
  titan::CheckpointMeta m;
  m.step = 3;
  m.mesh_dims = {"dp_shard"};
  m.mesh_shape = {1};
  m.model_args_json = R"({"dim":4,"n_layers":1})";
  m.config_toml = "[training]\nsteps = 3\n";
  m.state = {{"optimizer_step", 3}, {"lr_scheduler_step", 3}, {"data_consumed_sequences", 24}};
  m.global_batch = 8;
  m.seq_len = 16;
  std::vector<titan::TensorPiece> pieces;
  titan::TensorPiece w;
  w.group = "model";
  w.name = "tok_embeddings.weight";
  w.global_shape = {3, 4};
  w.data = torch::arange(12, torch::kFloat32);
  pieces.push_back(w);
  titan::TensorPiece half = w;  // an FSDP shard: a flat range of a TP box
  half.group = "optimizer/exp_avg";
  half.global_shape = {4, 4};
  half.box_offset = {2, 0};
  half.box_shape = {2, 4};
  half.flat_offset = 2;
  half.data = torch::ones({6}, torch::kFloat32);
  pieces.push_back(half);
  const std::string file = out + "/rank_file.h5";
  titan::write_rank_file(file, m, pieces, torch::arange(16, torch::kUInt8));
  std::ofstream(out + "/complete_marker.json")
      << R"({"format":"titan-checkpoint","format_version":1,"step":3,"world_size":2,)"
      << R"("model_only":false,"rank_files":["rank-00000.h5","rank-00001.h5"],)"
      << R"("rank_file_bytes":[)" << std::filesystem::file_size(file) << R"(,-1],"extra_files":[]})"
      << "\n";
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // HDF5's own error stack print is noise here
  if (const char* out = std::getenv("TITAN_FUZZ_WRITE_SEEDS")) {
    write_seeds(out);
    std::exit(0);
  }
  // Under $TMPDIR: launch/fuzz points it into its output folder, because a finding ends the
  // process without running atexit.
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/titan-fuzz-ckpt-XXXXXX";
  const char* d = mkdtemp(tmpl.data());
  if (!d) std::abort();
  g_dir = d;
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(g_dir, ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    if (size > 0 && data[0] == '{') {
      (void)titan::parse_complete_marker(bytes, "fuzz/COMPLETE");
      return 0;
    }
    {
      std::ofstream f(g_dir + "/rank-00000.h5", std::ios::binary | std::ios::trunc);
      f.write(bytes.data(), static_cast<std::streamsize>(size));
    }
    titan::CheckpointReader reader(g_dir, {"rank-00000.h5"}, {static_cast<int64_t>(size)});
    // Each tensor on its own: one that fails must not hide the checks of the others.
    for (const char* group : {"model", "optimizer/exp_avg", "optimizer/exp_avg_sq"}) {
      for (const auto& name : reader.names(group)) {
        try {
          (void)reader.read_full(group, name);
        } catch (const titan::Error&) {
        }
      }
    }
    (void)reader.rng(0);
  } catch (const titan::Error&) {
  }
  return 0;
}
