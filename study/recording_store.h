// RecordingStore: recordings kept on disk between titan-study runs, as the bytes recorder
// processes send (trainer/simulate/recording_wire.h). A recording depends only on what the
// request says (the kind, the probe's first degree, RecordingCache::key of the config) and on
// the code that records it, so an entry is named by both: the request and the build ids of
// every object loaded in this process (titan-study, libtorch and the rest), read from their
// ELF notes. A rebuilt binary or an updated library therefore finds none of the old entries,
// instead of replaying a trace its own recorder would no longer make. A study that repeats a
// search (other chips, chip counts, prices) reads its recordings instead of recording them.
// Used by study/recorder_pool.cpp; titan-study's --recording-cache DIR turns it on.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace titan::study {

class RecordingStore {
 public:
  // Creates dir if needed (a config error naming it if it cannot be). At most max_bytes of
  // entries are kept: beyond that the least recently used go, when the store opens and every
  // 16 writes.
  explicit RecordingStore(std::string dir, uint64_t max_bytes = uint64_t{4} << 30);

  // The bytes recorded for request, if an entry holds them. An entry that fails its checks
  // (torn, damaged, another request under the same name) is removed and counted as damaged:
  // the caller records afresh.
  std::optional<std::string> load(const std::string& request);
  // Written aside and renamed, so a reader never sees half an entry; a write that fails
  // (disk full, permissions) is counted, warned about once, and loses nothing but the entry.
  void save(const std::string& request, const std::string& bytes);

  const std::string& dir() const { return dir_; }
  std::atomic<int64_t> hits{0}, misses{0}, writes{0}, damaged{0}, failed_writes{0};

  // The build ids (or, for an object without one, its path, size and modification time) of
  // every ELF object loaded in this process, in load order: the code an entry was made by.
  static std::string code_identity();

 private:
  std::string path_of(const std::string& request) const;
  void trim();  // least recently used entries removed until at most max_bytes_ remain
  std::string dir_;
  uint64_t max_bytes_;
  std::string code_;
  std::atomic<bool> warned_{false};
};

}  // namespace titan::study
