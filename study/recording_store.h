// RecordingStore: recordings kept on disk between titan-study runs, as the bytes recorder
// processes send (trainer/simulate/recording_wire.h). A recording depends only on what the
// request says (the kind, the probe's first degree, RecordingCache::key of the config, the
// tokenizer file's identity: study/recorder_pool.cpp) and on the code that records it, so an
// entry is named by both: the request and the build ids of every object loaded in this
// process (titan-study, libtorch and the rest), read from their ELF notes. A rebuilt binary
// or an updated library therefore finds none of the old entries, instead of replaying a trace
// its own recorder would no longer make. A study that repeats a search on another device,
// topology or prices reads its recordings instead of recording them (new chip counts mostly
// resolve to new degrees, which are in the key). Used by study/recorder_pool.cpp;
// titan-study's --recording-cache DIR turns it on.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace titan::study {

class RecordingStore {
 public:
  // Creates dir if needed (a config error naming it if it cannot be). About max_bytes of
  // entries are kept: beyond that the least recently read or written go, when the store opens
  // and every 16 writes (so the folder can pass the limit by up to 16 entries between trims).
  // code: what made the entries (code_identity(); tests give another).
  explicit RecordingStore(std::string dir, uint64_t max_bytes = uint64_t{4} << 30,
                          std::string code = code_identity());

  // The bytes recorded for request, if an entry holds them. An entry that fails its checks
  // (torn, damaged, another request under the same name) is removed and counted as damaged:
  // the caller records afresh.
  std::optional<std::string> load(const std::string& request);
  // Written aside and renamed, so a reader never sees half an entry; a write that fails
  // (disk full, permissions) is counted, warned about once, and loses nothing but the entry.
  void save(const std::string& request, const std::string& bytes);

  const std::string& dir() const { return dir_; }
  std::atomic<int64_t> hits{0}, misses{0}, writes{0}, damaged{0}, failed_writes{0};

  // The build ids (or, for an object without one, its path, size, inode and modification
  // time) of every ELF object loaded in this process when it is called, in load order: the
  // code an entry was made by.
  static std::string code_identity();
  // A file as it is on disk now: path, size, inode and modification time to the nanosecond.
  static std::string file_identity(const std::string& path);

 private:
  std::string path_of(const std::string& request) const;
  void trim();  // least recently used entries removed until at most max_bytes_ remain
  std::string dir_;
  uint64_t max_bytes_;
  std::string code_;
  std::atomic<bool> warned_{false};
  std::mutex trim_mu_;
};

}  // namespace titan::study
