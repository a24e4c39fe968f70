// Recordings kept on disk between studies (study/recording_store.h): an entry gives back the
// bytes saved for its request and nothing for another; a damaged, cut or misnamed entry is
// removed and recorded again; the least recently used entries go beyond the size limit; a
// write that fails loses only the entry; entries of other code are not found; recorder
// processes given a store read a recording another recorder saved, identical to a fresh one,
// without asking their process, and record again when the config's tokenizer file changed.
#include "study/recording_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "same_step.h"
#include "study/recorder_pool.h"
#include "study_fixture.h"
#include "trainer/simulate/recording_wire.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::tmp_dir;

std::string fresh_dir(const std::string& name) {
  const std::string d = tmp_dir("recording_store/" + name);
  fs::remove_all(d);
  return d;
}

std::vector<fs::path> entries(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  return out;
}

void write_file(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

TEST(RecordingStore, GivesBackTheBytesSavedForItsRequestOnly) {
  const std::string dir = fresh_dir("round_trip");
  RecordingStore store(dir);
  std::string bytes(100000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7919 % 251);
  EXPECT_FALSE(store.load("request a").has_value());
  store.save("request a", bytes);
  store.save("request b", "other bytes");
  ASSERT_EQ(entries(dir).size(), 2u);
  EXPECT_EQ(store.load("request a").value_or(""), bytes);
  EXPECT_EQ(store.load("request b").value_or(""), "other bytes");
  EXPECT_FALSE(store.load("request c").has_value());
  // Another store on the same folder (the next study) finds them too.
  RecordingStore later(dir);
  EXPECT_EQ(later.load("request a").value_or(""), bytes);
  EXPECT_EQ(store.hits.load(), 2);
  EXPECT_EQ(store.misses.load(), 2);
  EXPECT_EQ(store.writes.load(), 2);
  EXPECT_EQ(store.damaged.load(), 0);
}

TEST(RecordingStore, DamagedCutOrMisnamedEntriesAreRemovedAndMissed) {
  const std::string dir = fresh_dir("damaged");
  RecordingStore store(dir);
  const std::string bytes(5000, 'r');
  auto only_entry = [&] {
    const std::vector<fs::path> e = entries(dir);
    EXPECT_EQ(e.size(), 1u);
    return e.empty() ? fs::path() : e[0];
  };
  // One byte of the recording changed (the checksum), the entry cut short, the entry of one
  // request under another's name (a name collision): each is a miss that removes the entry.
  store.save("request a", bytes);
  fs::path p = only_entry();
  std::string e = read_file(p);
  e[e.size() / 2] ^= 1;
  write_file(p, e);
  EXPECT_FALSE(store.load("request a").has_value());
  EXPECT_FALSE(fs::exists(p));

  store.save("request a", bytes);
  e = read_file(p);
  write_file(p, e.substr(0, e.size() - 3));
  EXPECT_FALSE(store.load("request a").has_value());
  EXPECT_FALSE(fs::exists(p));

  store.save("request b", bytes);
  const fs::path b = only_entry();
  store.save("request a", bytes);
  fs::rename(b, p);
  EXPECT_FALSE(store.load("request a").has_value());
  EXPECT_EQ(store.damaged.load(), 3);
  EXPECT_TRUE(entries(dir).empty());

  store.save("request a", bytes);  // recorded again
  EXPECT_EQ(store.load("request a").value_or(""), bytes);
}

TEST(RecordingStore, LeastRecentlyUsedEntriesGoBeyondTheLimit) {
  const std::string dir = fresh_dir("trim");
  std::vector<fs::path> paths;
  {
    RecordingStore store(dir);
    for (const char* r : {"oldest", "middle", "newest"}) {
      store.save(r, std::string(1000, 'x'));
      for (const fs::path& p : entries(dir))
        if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
    }
    ASSERT_EQ(paths.size(), 3u);
    const auto now = fs::file_time_type::clock::now();
    for (size_t i = 0; i < 3; ++i) fs::last_write_time(paths[i], now - std::chrono::minutes(30 - 10 * i));
    // Reading the oldest makes it the most recently used.
    EXPECT_TRUE(store.load("oldest").has_value());
  }
  const uint64_t entry = fs::file_size(paths[1]);
  RecordingStore store(dir, 2 * entry + entry / 2);  // room for two
  EXPECT_TRUE(fs::exists(paths[0]));
  EXPECT_FALSE(fs::exists(paths[1]));
  EXPECT_TRUE(fs::exists(paths[2]));
  EXPECT_TRUE(store.load("oldest").has_value());
  EXPECT_FALSE(store.load("middle").has_value());
  EXPECT_TRUE(store.load("newest").has_value());
}

TEST(RecordingStore, AFailedWriteLosesOnlyTheEntry) {
  const std::string dir = fresh_dir("write_fails");
  RecordingStore store(dir);
  fs::remove_all(dir);
  write_file(dir, "a file where the folder was");
  store.save("request a", "bytes");
  EXPECT_EQ(store.failed_writes.load(), 1);
  EXPECT_EQ(store.writes.load(), 0);
  EXPECT_FALSE(store.load("request a").has_value());
  // A folder that cannot be made is a config error naming it.
  try {
    RecordingStore bad(dir + "/sub");
    ADD_FAILURE() << "a store under a file was made";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find(dir + "/sub"), std::string::npos) << e.what();
  }
  fs::remove(dir);
}

TEST(RecordingStore, CodeIdentityHoldsTheLoadedObjectsBuildIds) {
  const std::string id = RecordingStore::code_identity();
  EXPECT_EQ(id, RecordingStore::code_identity());
  // This test binary, libc and libtorch at least, one line each; the first is this binary's
  // build id (hex digits, not a path), since it is what a rebuild changes.
  EXPECT_GE(std::count(id.begin(), id.end(), '\n'), 3) << id;
  const std::string first = id.substr(0, id.find('\n'));
  EXPECT_GE(first.size(), 32u) << first;
  EXPECT_EQ(first.find_first_not_of("0123456789abcdef"), std::string::npos) << first;
}

TEST(RecordingStore, EntriesOfOtherCodeOrAnotherFileAreNotFound) {
  const std::string dir = fresh_dir("other_code");
  RecordingStore before(dir, uint64_t{1} << 30, "build a\n");
  before.save("request a", "bytes of build a");
  RecordingStore after(dir, uint64_t{1} << 30, "build b\n");
  EXPECT_FALSE(after.load("request a").has_value());
  EXPECT_EQ(after.misses.load(), 1);
  EXPECT_EQ(after.damaged.load(), 0);
  EXPECT_EQ(before.load("request a").value_or(""), "bytes of build a");
  // A file's identity follows what is on disk (the tokenizer's, in a recorder's request).
  const std::string file = dir + "/tokenizer.json";
  write_file(file, "one");
  const std::string one = RecordingStore::file_identity(file);
  write_file(file, "two");
  fs::last_write_time(file, fs::last_write_time(file) + std::chrono::seconds(1));
  EXPECT_NE(RecordingStore::file_identity(file), one);
  EXPECT_NE(RecordingStore::file_identity(dir + "/none.json"), RecordingStore::file_identity(file));
}

TEST(RecordingStore, SomethingElseUnderAnEntrysNameIsMissedAndLeft) {
  const std::string dir = fresh_dir("not_a_file");
  RecordingStore store(dir);
  store.save("request a", "bytes");
  const fs::path p = entries(dir).at(0);
  fs::remove(p);
  fs::create_directories(p / "inside");
  EXPECT_FALSE(store.load("request a").has_value());
  EXPECT_EQ(store.damaged.load(), 1);
  EXPECT_TRUE(fs::is_directory(p / "inside"));
}

}  // namespace

// Its own suite: forks only while its process has one thread (recorder_pool.h).
TEST(RecordingStoreRecorders, ARecorderReadsWhatAnotherSavedWithoutAskingItsProcess) {
  const std::string dir = fresh_dir("recorders");
  auto store = std::make_shared<RecordingStore>(dir);
  std::vector<std::unique_ptr<Recorder>> remote = start_recorder_processes(2, store);
  if (remote.size() < 2) GTEST_SKIP() << "this process already runs threads: no recorder processes";
  const JobConfig cfg = testing::tiny_config({"--parallelism.tensor_parallel_degree", "2"});
  const RecordedStep a = remote[0]->record(cfg);
  EXPECT_EQ(store->writes.load(), 1);
  const RecordedStep b = remote[1]->record(cfg);
  EXPECT_EQ(store->hits.load(), 1);
  EXPECT_EQ(store->writes.load(), 1);
  testing::expect_same_step(a, b, "tp 2 x dp_shard 4, read from the store");
  EXPECT_EQ(encode_step(a), encode_step(b));
  EXPECT_EQ(a.placement.describe(), b.placement.describe());
  // A probe of the same config is another request.
  const ProbeRecording p = remote[1]->probe(cfg, 3);
  EXPECT_EQ(store->writes.load(), 2);
  const ProbeRecording q = remote[0]->probe(cfg, 3);
  EXPECT_EQ(store->hits.load(), 2);
  EXPECT_EQ(p.degree, q.degree);
  EXPECT_EQ(encode_probe(p), encode_probe(q));
  // A config error is not kept: each asks its process again.
  const JobConfig bad = testing::tiny_config({"--parallelism.tensor_parallel_degree", "3"});
  EXPECT_THROW((void)remote[0]->record(bad), Error);
  EXPECT_THROW((void)remote[1]->record(bad), Error);
  EXPECT_EQ(store->writes.load(), 2);
  EXPECT_EQ(store->hits.load(), 2);
  // A tokenizer file named by the config is part of the request: the same path holding
  // another file is recorded again.
  const std::string tok = dir + "/tokenizer.json";
  write_file(tok, "{}");
  const JobConfig named = testing::tiny_config({"--model.tokenizer_path", tok});
  (void)remote[0]->record(named);
  (void)remote[1]->record(named);
  EXPECT_EQ(store->writes.load(), 3);
  EXPECT_EQ(store->hits.load(), 3);
  write_file(tok, "{ }");
  fs::last_write_time(tok, fs::last_write_time(tok) + std::chrono::seconds(1));
  (void)remote[1]->record(named);
  EXPECT_EQ(store->writes.load(), 4);
  EXPECT_EQ(store->hits.load(), 3);
}

}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
