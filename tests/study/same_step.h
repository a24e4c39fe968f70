// Event-by-event comparison of two recorded steps (sizes, data flow, collectives, pipeline
// segments), for the tests of steps made another way than recording them: resized from another
// degree (shard_resize_test.cpp), carried from a recorder process (recorder_pool_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "trainer/simulate/simulate.h"

namespace titan::study::testing {

inline void expect_same_trace(const devices::Trace& fresh, const devices::Trace& resized,
                              const std::string& what) {
  const auto &a = fresh.events(), &b = resized.events();
  ASSERT_EQ(a.size(), b.size()) << what;
  int64_t differences = 0;
  for (size_t i = 0; i < a.size() && differences < 5; ++i) {
    const devices::TraceEvent &x = a[i], &y = b[i];
    const std::string at = what + " event " + std::to_string(i) + " (" + x.op.name + ")";
    bool same = x.type == y.type && x.work == y.work;
    if (x.type == devices::TraceEvent::Type::kCompute) {
      const devices::OpDesc &p = x.op, &q = y.op;
      same = same && p.name == q.name && p.kind == q.kind && p.bytes_read == q.bytes_read &&
             p.bytes_written == q.bytes_written && p.flops == q.flops &&
             p.dtype_bytes == q.dtype_bytes && p.reads.size() == q.reads.size() &&
             p.writes.size() == q.writes.size();
      for (size_t k = 0; same && k < p.reads.size(); ++k)
        same = p.reads[k].id == q.reads[k].id && p.reads[k].bytes == q.reads[k].bytes &&
               p.reads[k].flow == q.reads[k].flow;
      for (size_t k = 0; same && k < p.writes.size(); ++k)
        same = p.writes[k].id == q.writes[k].id && p.writes[k].bytes == q.writes[k].bytes &&
               p.writes[k].flow == q.writes[k].flow;
      EXPECT_TRUE(same) << at << ": bytes " << p.bytes_read << "/" << p.bytes_written << " vs "
                        << q.bytes_read << "/" << q.bytes_written;
    } else if (x.type == devices::TraceEvent::Type::kIssue) {
      same = same && x.collective.kind == y.collective.kind &&
             x.collective.group == y.collective.group && x.collective.bytes == y.collective.bytes &&
             x.collective.stream == y.collective.stream;
      EXPECT_TRUE(same) << at << ": collective on " << x.collective.group << " "
                        << x.collective.bytes << " vs " << y.collective.group << " "
                        << y.collective.bytes << " bytes";
    } else {
      EXPECT_TRUE(same) << at;
    }
    differences += same ? 0 : 1;
  }
}

inline void expect_same_step(const RecordedStep& fresh, const RecordedStep& resized,
                             const std::string& what) {
  EXPECT_EQ(fresh.local_params, resized.local_params) << what;
  EXPECT_EQ(fresh.global_batch, resized.global_batch) << what;
  EXPECT_EQ(fresh.microbatches, resized.microbatches) << what;
  EXPECT_EQ(fresh.dims.to_string(), resized.dims.to_string()) << what;
  ASSERT_EQ(!fresh.pipeline, !resized.pipeline) << what;
  if (!fresh.pipeline) return expect_same_trace(fresh.trace, resized.trace, what);
  const RecordedPipeline &a = *fresh.pipeline, &b = *resized.pipeline;
  EXPECT_EQ(a.local_params, b.local_params) << what;
  ASSERT_EQ(a.ranks.size(), b.ranks.size()) << what;
  for (size_t q = 0; q < a.ranks.size(); ++q) {
    ASSERT_EQ(a.ranks[q].size(), b.ranks[q].size()) << what << " rank " << q;
    for (size_t s = 0; s < a.ranks[q].size(); ++s)
      expect_same_trace(a.ranks[q][s].trace, b.ranks[q][s].trace,
                        what + " rank " + std::to_string(q) + " segment " + std::to_string(s));
  }
}

}  // namespace titan::study::testing
