// The byte format of recorded steps (recording_wire.h): a writer and a reader of plain values,
// strings, names (each string once per message) and lists, and the codecs of a recording's
// parts, one file each so that a struct's fields and their wire stay side by side: traces and
// Communicator calls (recording_wire_trace.cpp), pipelines (recording_wire_pipeline.cpp),
// FSDP's shard notes (recording_wire_shard_notes.cpp); the step and the entry points are
// recording_wire.cpp's.
// Each file checks the sizes of the structs it carries, so that a field added without its
// wire stops the build there.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/error.h"
#include "devices/interned_name.h"
#include "devices/step_simulator.h"
#include "trainer/simulate/shard_notes.h"
#include "trainer/simulate/simulate.h"

namespace titan::wire {

class Writer {
 public:
  template <class T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T> &&
                      (std::is_floating_point_v<T> || std::has_unique_object_representations_v<T>),
                  "a struct with padding would put indeterminate bytes on the wire");
    std::memcpy(room(sizeof(T)), &v, sizeof(T));
  }
  void i64(int64_t v) { pod(v); }
  void str(const std::string& s) {
    i64(static_cast<int64_t>(s.size()));
    if (!s.empty()) std::memcpy(room(s.size()), s.data(), s.size());
  }
  // A name as its index in this message's table of names, its string following the first time:
  // a step names thousands of ops from a few hundred names, and the reader interns each once.
  void name(const devices::InternedName& n) {
    const auto [at, added] = names_.try_emplace(&n.str(), static_cast<int64_t>(names_.size()));
    i64(at->second);
    if (added) str(n.str());
  }
  template <class T, class F>
  void list(const std::vector<T>& v, F each) {
    i64(static_cast<int64_t>(v.size()));
    for (const T& x : v) each(x);
  }
  void i64s(const std::vector<int64_t>& v) {
    list(v, [&](int64_t x) { i64(x); });
  }
  std::string take() {
    out_.resize(size_);
    size_ = 0;
    names_.clear();  // a next message starts its own table
    return std::move(out_);
  }

 private:
  // n more bytes at the end, written by the caller. The buffer grows by doubling and is cut to
  // size in take(): a step is some 10^5 small fields, and an append per field (a call, a
  // capacity check, a length update) was most of encoding one.
  char* room(size_t n) {
    if (size_ + n > out_.size()) out_.resize(std::max(2 * out_.size(), size_ + n + 4096));
    char* p = out_.data() + size_;
    size_ += n;
    return p;
  }
  std::string out_;
  size_t size_ = 0;  // bytes written; out_ beyond them is spare room
  std::unordered_map<const std::string*, int64_t> names_;  // pooled string -> index
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <class T>
  T pod() {
    static_assert(std::is_trivially_copyable_v<T>);
    TITAN_CHECK(pos_ + sizeof(T) <= in_.size(), "recording message: truncated at byte ", pos_,
                " of ", in_.size());
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  int64_t i64() { return pod<int64_t>(); }
  // A count of things that take at least `each` bytes each on the wire.
  size_t count(size_t each = 1) {
    const int64_t n = i64();
    TITAN_CHECK(n >= 0 && static_cast<size_t>(n) <= (in_.size() - pos_) / each,
                "recording message: a count of ", n, " at byte ", pos_, " exceeds the message");
    return static_cast<size_t>(n);
  }
  std::string str() {
    const size_t n = count();
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  devices::InternedName name() {
    const int64_t i = i64();
    TITAN_CHECK(i >= 0 && static_cast<size_t>(i) <= names_.size(), "recording message: name ", i, " at byte ", pos_,
                " is not in the message's ", names_.size(), " names");
    if (static_cast<size_t>(i) == names_.size()) {
      const size_t n = count();
      names_.emplace_back(in_.substr(pos_, n));
      pos_ += n;
    }
    return names_[static_cast<size_t>(i)];
  }
  template <class T, class F>
  std::vector<T> list(F each) {
    std::vector<T> v(count());
    for (T& x : v) each(x);
    return v;
  }
  std::vector<int64_t> i64s() {
    return list<int64_t>([&](int64_t& x) { x = i64(); });
  }
  void done() const {
    TITAN_CHECK(pos_ == in_.size(), "recording message: ", in_.size() - pos_, " bytes left over");
  }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  std::vector<devices::InternedName> names_;  // by index, as Writer::name numbered them
};

// Ops, issues and waits in order (the data flow and the handles are Trace's to derive), then
// the storage table and the resizes.
void put(Writer& w, const devices::Trace& t);
void get(Reader& r, devices::Trace* t);
// A storage table and a list of resizes (a trace's, or a pipeline rank's).
void put(Writer& w, const std::vector<devices::StorageRecord>& table);
void get(Reader& r, std::vector<devices::StorageRecord>* table);
void put(Writer& w, const std::vector<devices::StorageResize>& resizes);
void get(Reader& r, std::vector<devices::StorageResize>* resizes);
// Every Communicator call of a step.
void put(Writer& w, const std::vector<SimCollectiveEvent>& calls);
void get(Reader& r, std::vector<SimCollectiveEvent>* calls);

// A pipeline's schedule, segments, calls and storage tables; its memory is walked again on
// arrival.
void put(Writer& w, const RecordedPipeline& p);
void get(Reader& r, RecordedPipeline* p);

void put(Writer& w, const ShardNotes& n);
void get(Reader& r, ShardNotes* n);

}  // namespace titan::wire
