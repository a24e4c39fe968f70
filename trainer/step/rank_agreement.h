// Every rank of a job must train the same config. Ranks that disagree on a shape, a degree,
// a batch or a schedule issue collectives of other sizes or counts than their peers, which
// MPI turns into a buffer overrun (heap corruption, SIGABRT) or a hang; a launcher that
// passes one rank other arguments (mpirun's ':' syntax, a per-host wrapper) does just that.
// check_ranks_agree() compares the configs at start, before any other collective.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "collectives/communicator.h"
#include "trainer/config/job_config.h"

namespace titan {

// ("section.key", value text) of every key that must match on all ranks, plus the resolved
// vocabulary (from the tokenizer file, which may sit at another path on each host). Paths,
// thread counts and free text may differ per host and are left out.
std::vector<std::pair<std::string, std::string>> agreed_settings(const JobConfig& cfg, int64_t vocab_size);

// Collective over `world` (one all_gather of a hash per setting). Throws a config error on
// every rank when any rank differs, naming the first differing keys, the ranks that differ
// from rank 0 and this rank's value.
void check_ranks_agree(const JobConfig& cfg, int64_t vocab_size, Communicator& world);

}  // namespace titan
