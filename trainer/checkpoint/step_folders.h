// The checkpoint folder on disk: step-N folders, their COMPLETE markers, and the commit of a
// finished save (rank files durable -> marker -> rename -> pruning). No collectives, so the
// commit may run on the async writer thread. Used by the Checkpointer and tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace titan {

std::string rank_file(int64_t rank);  // "rank-00003.h5"
std::string step_name(int64_t step);  // "step-12"

// A step folder found under the checkpoint folder.
struct StepFolder {
  int64_t step = 0;
  std::string path;
  bool complete = false;  // has its COMPLETE marker
};
// step-N folders, newest first.
std::vector<StepFolder> list_step_folders(const std::string& folder);

// Puts in place each .tmp-step-N folder that holds a whole save (its COMPLETE marker and the
// rank files it lists, at their sizes): a commit stopped between the marker and the rename.
// Returns the step folders it finished. Rank 0 only, with no save of this job in flight.
std::vector<std::string> finish_interrupted_commits(const std::string& folder);

// Finishes interrupted commits, then removes the .tmp-step-N folders of saves that never
// finished; returns how many it removed. Only when no save of this job is in flight (a
// stopping job, after Checkpointer::wait).
int remove_unfinished_saves(const std::string& folder);

// A final model-only export (its COMPLETE marker says so).
bool is_model_only(const std::string& dir);

// What a step folder's COMPLETE marker (JSON) lists: the rank files in saved-rank order and
// their byte sizes. Any malformed, missing or out-of-range field is a runtime titan::Error
// naming `where` and the key (a damaged checkpoint, skipped at resume). No torch, no disk:
// the checkpoint fuzz target (tests/trainer/fuzz/checkpoint_fuzz.cpp) calls it on raw bytes.
struct CompleteMarker {
  std::vector<std::string> rank_files;
  std::vector<int64_t> rank_file_bytes;  // -1: unknown
};
CompleteMarker parse_complete_marker(const std::string& text, const std::string& where);
// dir/COMPLETE read and parsed; an Error naming dir if it is missing or malformed.
CompleteMarker read_complete_marker(const std::string& dir);

// Creates the folder if needed and writes (then removes) a probe file; a config error naming the
// folder when it cannot be written, so a bad checkpoint.folder fails at start, not at a save.
void check_folder_writable(const std::string& folder, int64_t rank);

// Takes an exclusive lock on <folder>/.titan-lock (flock) for the rest of the process, so that
// a second job started on the same folder (the same command run twice) fails at start, naming
// the process that holds it, instead of the two overwriting each other's step folders and one
// deleting the other's save in flight. Rank 0 takes it (it commits every save). Taken again
// by this process, it is a no-op. The OS drops the lock when the process ends, however it ends.
void lock_checkpoint_folder(const std::string& folder);

// Writes a small text file and fsyncs it before renaming it into place.
void write_text_durably(const std::string& path, const std::string& text);

// What rank 0 needs to commit a save once its own rank file is written.
struct StepCommit {
  int64_t step = 0;
  int world = 1;
  std::string folder, tmp_dir;
  bool model_only = false;
  int64_t keep_latest_k = 0;  // 0: keep every full checkpoint
  double timeout_s = 600;     // how long to wait for the other ranks' files
};
// Waits until every rank's file is durable (each other rank leaves "<rank file>.done" holding
// its size), writes the COMPLETE marker into tmp_dir, renames it to step-N (replacing an older
// step-N) and prunes old steps.
void commit_step_folder(const StepCommit& job);
// The other ranks' half: marks this rank's file durable for commit_step_folder.
void mark_rank_file_done(const std::string& tmp_dir, int rank);

}  // namespace titan
