// Layout search: for the base config's model, device and chip count, every layout of a
// search space (tp, cp, pp, dp_replicate and dp_shard degrees multiplying to the chip count,
// micro-batch rows, pipeline schedule, activation checkpointing, collective mode) is
// simulated; the ones that fit are ranked by tokens/s per chip, and every family (degrees)
// with no fitting member says why (memory, divisibility). Used by titan-study --search.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "study/evaluate.h"
#include "study/parallel_runner.h"
#include "study/recording_cache.h"
#include "study/sweep_file.h"

namespace titan::study {

struct SearchSpace {
  std::vector<int64_t> tp = {1, 2, 4, 8};
  std::vector<int64_t> cp = {1};  // context parallel degrees (long sequences: e.g. 1, 2, 4, 8)
  // Expert parallel degrees (MoE models: e.g. 1, 8, 32, 128), each borrowed from dp_shard x cp.
  std::vector<int64_t> ep = {1};
  // Expert tensor parallel choices (TorchTitan allows two): "1", experts whole on every tp rank;
  // "tp", experts sharded over tp (parallelism.expert_tensor_parallel_degree = tp; skipped at tp 1).
  std::vector<std::string> etp = {"1"};
  std::vector<int64_t> pp = {1, 2, 4, 8};
  std::vector<int64_t> dp_replicate = {1, 2, 8};
  std::vector<int64_t> local_batch = {1, 2, 4};        // rows per rank and micro-batch (pp = 1)
  std::vector<int64_t> pp_microbatches = {1, 2};       // micro-batches per stage: x pp (pp > 1)
  std::vector<std::string> schedules = {"1F1B", "Interleaved1F1B", "ZBVZeroBubble"};
  // "op": selective with selective_ac_option = "op" (TorchTitan's op-level policy).
  std::vector<std::string> activation_checkpoint = {"none", "selective", "full", "op"};
  std::vector<std::string> collective_modes = {"fused", "separate"};
};

// The default space with a sweep file's [search] lists in place of the defaults (keys as the
// fields above); an unknown key or a value that is not a positive count is a config error.
SearchSpace search_space_from(const std::vector<std::pair<std::string, std::vector<std::string>>>& lists,
                              const std::string& label);

// A layout family: its degrees ("tp 4 x pp 2 x dp_replicate 2").
struct Candidate {
  std::string family;
  Overrides overrides;
};

// Every candidate for `chips`: degrees are divisors whose product is `chips` (dp_shard is
// what the others leave); a degree that does not divide goes to `skipped` (family -> why).
std::vector<Candidate> enumerate_layouts(int64_t chips, const SearchSpace& space,
                                         std::map<std::string, std::string>& skipped);

struct SearchResult {
  std::vector<Point> points;  // every evaluated candidate, in enumeration order
  std::vector<size_t> ranked;  // indices of fitting points, best tokens/s per chip first
  // Families with no fitting member -> why ("memory: 3 of 54 over 192 GiB (best 201.3 GiB)").
  std::map<std::string, std::string> rejected;
  std::vector<std::string> families;  // in enumeration order
  RunStats stats;
};

// Searches base's model / device / chip count. Ties in tokens/s keep enumeration order, so
// the ranking is deterministic.
SearchResult search_layouts(const JobConfig& base, const SearchSpace& space, RecordingCache& cache, int threads,
                            const std::string& progress_label);
// The ranking and the rejected families' reasons, from evaluated candidates (points[i] is
// cands[i]'s); `rejected` comes with the families enumeration skipped.
SearchResult rank_search(const std::vector<Candidate>& cands, std::vector<Point> points,
                         std::map<std::string, std::string> rejected, const RunStats& stats);

// The top `n` as a text table (layout, micro-batching, schedule, AC, mode, tokens/s/chip,
// MFU, memory), then the rejected families.
std::string format_search(const SearchResult& r, size_t n);

}  // namespace titan::study
