// Recordings carried as bytes (trainer/simulate/recording_wire.h) and made in recorder
// processes (study/recorder_pool.h): a round-tripped step is the recorded one field by field
// (its data flow rebuilt), replays to the identical step and resizes like it; a damaged message
// is an error; a recorder process records what this process records, and its errors arrive
// with their kind and text.
#include "study/recorder_pool.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "same_step.h"
#include "study/evaluate.h"
#include "study_fixture.h"
#include "trainer/simulate/recording_wire.h"
#include "trainer/simulate/recording_wire_format.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

using testing::expect_same_step;
using testing::tiny_config;

const std::vector<std::string> kPipeline = {"--parallelism.pipeline_parallel_degree",
                                            "2",
                                            "--activation_checkpoint.mode",
                                            "none",
                                            "--training.local_batch_size",
                                            "2",
                                            "--parallelism.pipeline_parallel_microbatch_size",
                                            "1"};

// Where two encodings first differ ("" when equal): the bytes themselves are no message.
std::string first_difference(const std::string& a, const std::string& b) {
  if (a == b) return "";
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return "differ from byte " + std::to_string(i) + " (sizes " + std::to_string(a.size()) + ", " +
         std::to_string(b.size()) + ")";
}

void expect_same_replay(const JobConfig& cfg, const RecordedStep& a, const RecordedStep& b,
                        const std::string& what) {
  const devices::ChipSpec chip = simulated_chip(cfg);
  const SimulationResult x = replay_step(cfg, a, chip, a.placement),
                         y = replay_step(cfg, b, chip, a.placement);
  EXPECT_EQ(x.report.step_time_s, y.report.step_time_s) << what;
  EXPECT_EQ(x.report.compute_s, y.report.compute_s) << what;
  EXPECT_EQ(x.report.exposed_comm_s, y.report.exposed_comm_s) << what;
  EXPECT_EQ(x.memory.total, y.memory.total) << what;
  EXPECT_EQ(x.mfu_percent, y.mfu_percent) << what;
}

TEST(RecordingWire, RoundTrippedStepsReplayToTheIdenticalStep) {
  for (const auto& [label, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"fsdp 8, fused", {}},
           {"tp 2 x dp_shard 4, separate",
            {"--parallelism.tensor_parallel_degree", "2", "--comm.collective_mode", "separate"}},
           {"pp 2 x dp_shard 4", kPipeline},
           {"pp 2 x dp_shard 4, 8 micro-batches replayed on fewer",
            {"--parallelism.pipeline_parallel_degree", "2", "--activation_checkpoint.mode", "none",
             "--training.local_batch_size", "8", "--parallelism.pipeline_parallel_microbatch_size", "1"}}}) {
    SCOPED_TRACE(label);
    const JobConfig cfg = tiny_config(args);
    const RecordedStep rec = record_step(cfg);
    if (label.find("fewer") != std::string::npos) {  // the program carries the stand-ins
      ASSERT_TRUE(rec.pipeline);
      EXPECT_EQ(rec.pipeline->schedule.num_microbatches, 8);
      EXPECT_LT(rec.pipeline->recorded_microbatches, 8);
    }
    const std::string bytes = encode_step(rec);
    RecordedStep back = decode_step(bytes);
    // Every carried field (the op and event structs are guarded by their sizes in
    // recording_wire.cpp) encodes to the same bytes again; the data flow, which is rebuilt, is
    // compared event by event.
    EXPECT_EQ(first_difference(encode_step(back), bytes), "");
    expect_same_step(rec, back, label);
    EXPECT_EQ(rec.op_counts, back.op_counts);
    ASSERT_EQ(rec.calls.size(), back.calls.size());
    back.chip = rec.chip;
    back.placement = rec.placement;
    expect_same_replay(cfg, rec, back, label);
  }
}

TEST(RecordingWire, RoundTrippedProbeResizesLikeTheRecordedOne) {
  for (const auto& args : {std::vector<std::string>{}, kPipeline}) {
    const JobConfig at2 = tiny_config(args);  // dp_shard 4 on 8 chips (pp 2: 4 per stage)
    const ProbeRecording probe = record_probe(at2);
    const ProbeRecording back = decode_probe(encode_probe(probe), at2);
    EXPECT_EQ(back.degree, probe.degree);
    EXPECT_EQ(first_difference(encode_probe(back), encode_probe(probe)), "");
    RecordedStep a, b;
    std::string why;
    ASSERT_TRUE(resize_for_shard_degree(probe, at2, &a, &why)) << why;
    ASSERT_TRUE(resize_for_shard_degree(back, at2, &b, &why)) << why;
    expect_same_step(a, b, "resized to dp_shard 4");
  }
}

// A recorder process skips the memory walk (memory is not on the wire): what it sends, and
// the step the study decodes from it, are those of a recording that walked it.
TEST(RecordingWire, RecordingWithoutTheMemoryWalkDecodesToTheSameStep) {
  for (const auto& [label, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"fsdp 8, fused", {}}, {"pp 2 x dp_shard 4", kPipeline}}) {
    SCOPED_TRACE(label);
    const JobConfig cfg = tiny_config(args);
    const RecordedStep walked = record_step(cfg);
    set_recording_walks_memory(false);
    RecordedStep unwalked;
    try {
      unwalked = record_step(cfg);
    } catch (...) {
      set_recording_walks_memory(true);
      throw;
    }
    set_recording_walks_memory(true);
    const int64_t walked_peak = walked.pipeline ? walked.pipeline->memory[0].eager().peak_bytes
                                                : walked.memory.eager().peak_bytes;
    const int64_t unwalked_peak = unwalked.pipeline ? unwalked.pipeline->memory[0].eager().peak_bytes
                                                    : unwalked.memory.eager().peak_bytes;
    EXPECT_GT(walked_peak, 0);
    EXPECT_EQ(unwalked_peak, 0);  // not walked
    const std::string bytes = encode_step(unwalked);
    EXPECT_EQ(first_difference(bytes, encode_step(walked)), "");
    RecordedStep back = decode_step(bytes);
    back.chip = walked.chip;
    back.placement = walked.placement;
    expect_same_replay(cfg, walked, back, label);
  }
}

// A name travels once per message; later uses are its index, and an index the message has not
// defined is an error.
TEST(RecordingWire, NamesTravelOncePerMessage) {
  wire::Writer w;
  for (const char* n : {"aten::mm", "aten::empty_strided", "aten::mm", "aten::empty_strided", ""}) w.name(n);
  const std::string bytes = w.take();
  EXPECT_EQ(bytes.size(), 5 * 8 + (8 + 8) + (8 + 19) + 8);  // five indices; three strings with their lengths
  wire::Reader r(bytes);
  for (const char* n : {"aten::mm", "aten::empty_strided", "aten::mm", "aten::empty_strided", ""})
    EXPECT_EQ(r.name(), devices::InternedName(n));
  r.done();
  wire::Writer bad;
  bad.i64(1);  // the second name before the first
  const std::string b = bad.take();
  wire::Reader rb(b);
  try {
    (void)rb.name();
    ADD_FAILURE() << "an undefined name index decoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not in the message's 0 names"), std::string::npos) << e.what();
  }
}

// An op's matmul shape, grouped shapes and attention shape travel only when they differ from
// their defaults: each comes back as it went, and an unknown flag is an error.
TEST(RecordingWire, OpShapesTravelOnlyWhenSet) {
  devices::Trace t;
  devices::OpDesc plain;
  plain.name = "aten::add";
  plain.bytes_read = 64, plain.bytes_written = 32;
  plain.reads = {{1, 32}, {2, 32}};
  plain.writes = {{3, 32}};
  devices::OpDesc shaped = plain;
  shaped.name = "titan::grouped_attention";
  shaped.mm = {2, 3, 5, 7};
  shaped.groups = {{1, 4, 8, 16}, {1, 2, 8, 16}};
  shaped.attn = {1, 8, 2, 128, 256, 64, false, true};
  t.compute(devices::OpDesc(plain));
  t.compute(devices::OpDesc(shaped));
  wire::Writer w;
  wire::put(w, t);
  const std::string bytes = w.take();
  wire::Reader r(bytes);
  devices::Trace back;
  wire::get(r, &back);
  r.done();
  ASSERT_EQ(back.events().size(), 2u);
  const devices::OpDesc &a = back.events()[0].op, &b = back.events()[1].op;
  EXPECT_EQ(a.mm.batch, 1);
  EXPECT_EQ(a.mm.m, 0);
  EXPECT_TRUE(a.groups.empty());
  EXPECT_EQ(a.attn.heads, 0);
  EXPECT_TRUE(a.attn.causal);
  EXPECT_EQ(b.mm.batch, 2);
  EXPECT_EQ(b.mm.k, 7);
  ASSERT_EQ(b.groups.size(), 2u);
  EXPECT_EQ(b.groups[1].m, 2);
  EXPECT_EQ(b.attn.kv_len, 256);
  EXPECT_FALSE(b.attn.causal);
  EXPECT_TRUE(b.attn.backward);
  wire::Writer again;
  wire::put(again, back);
  EXPECT_EQ(again.take(), bytes);
  // The flags byte follows the name (index and string), kind, FLOPs and two byte counts.
  std::string bad = bytes;
  const size_t flags_at = 8 + sizeof(devices::TraceEvent::Type) + 8 + 8 + 9 + sizeof(devices::OpKind) + 8 + 16;
  ASSERT_LT(bad[flags_at], 8) << "the layout above moved";
  bad[flags_at] = 9;
  wire::Reader rb(bad);
  devices::Trace none;
  try {
    wire::get(rb, &none);
    ADD_FAILURE() << "an unknown shapes flag decoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op shapes flags 9 unknown"), std::string::npos) << e.what();
  }
}

TEST(RecordingWire, DamagedMessagesAreErrors) {
  const std::string bytes = encode_step(record_step(tiny_config()));
  for (size_t cut : {size_t{0}, size_t{7}, bytes.size() / 2, bytes.size() - 1}) {
    try {
      (void)decode_step(std::string_view(bytes).substr(0, cut));
      ADD_FAILURE() << "a message cut at byte " << cut << " decoded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("recording message"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW((void)decode_step(bytes + "x"), Error);  // bytes left over
}

TEST(RecorderPool, RecorderProcessRecordsWhatThisProcessRecords) {
  // Forks only while this process has one thread: first in its test process (ctest runs each
  // suite in its own process, and this suite holds this test only), not after other tests
  // started libtorch's threads.
  std::vector<std::unique_ptr<Recorder>> remote = start_recorder_processes(1);
  if (remote.empty()) GTEST_SKIP() << "this process already runs threads: no recorder process";
  std::unique_ptr<Recorder> local = in_process_recorder();
  const JobConfig cfg = tiny_config({"--parallelism.tensor_parallel_degree", "2"});
  const RecordedStep a = local->record(cfg), b = remote[0]->record(cfg);
  expect_same_step(a, b, "tp 2 x dp_shard 4");
  EXPECT_EQ(first_difference(encode_step(a), encode_step(b)), "");
  EXPECT_EQ(a.placement.describe(), b.placement.describe());
  expect_same_replay(cfg, a, b, "tp 2 x dp_shard 4");
  const ProbeRecording p = local->probe(cfg, 3), q = remote[0]->probe(cfg, 3);
  EXPECT_EQ(p.degree, q.degree);
  // The recorder process's CPU time (titan-study prints it): its recordings took some, and
  // this process's recorder reports none of its own (this process's time counts it).
  EXPECT_GT(remote[0]->cpu_seconds(), 0.0);
  EXPECT_LT(remote[0]->cpu_seconds(), 600.0);
  EXPECT_EQ(local->cpu_seconds(), 0.0);
  EXPECT_EQ(first_difference(encode_probe(p), encode_probe(q)), "");
  // A config error arrives as one, with the recorder's message.
  const JobConfig bad = tiny_config({"--parallelism.tensor_parallel_degree", "3"});
  std::string here, there;
  ErrorKind kind = ErrorKind::kRuntime;
  try {
    (void)local->record(bad);
  } catch (const Error& e) {
    here = e.what();
  }
  try {
    (void)remote[0]->record(bad);
  } catch (const Error& e) {
    there = e.what();
    kind = e.kind();
  }
  EXPECT_FALSE(here.empty());
  EXPECT_EQ(here, there);
  EXPECT_EQ(kind, ErrorKind::kConfig);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
