// abort_job_agreeing (job_abort.h): one line for a failure all ranks share.
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/abort_cleanup.h"
#include "collectives/job_abort.h"
#include "collectives/mpi_runtime.h"

namespace titan {
namespace {

// Tags no titan collective or MPI_Comm_create_group uses on MPI_COMM_WORLD.
constexpr int kReportTag = 29171;
constexpr int kVerdictTag = 29172;
constexpr int kAckTag = 29173;

// Limits, from entering the failure. MPI_Init waits for every rank to call it, and in a gloo
// job the ranks that did not fail never do, so a rank gives up on it rather than hang. After
// MPI_Init the failed ranks reach the exchange within milliseconds of each other: rank 0
// collects reports for a bounded time, the others wait a little longer for its verdict.
constexpr double kInitSeconds = 3.0;
constexpr double kCollectSeconds = 0.75;
constexpr double kVerdictSeconds = 1.0;
constexpr double kSendSeconds = 0.3;

using Clock = std::chrono::steady_clock;

int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::atoi(s) : fallback;
}

// True when every request completed before `seconds` passed.
bool wait_all(std::vector<MPI_Request>& reqs, double seconds) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int done = 0;
    MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Shared by the exchange thread and the main thread; whoever settles it first decides what
// is printed, so that a rank never prints twice.
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  bool initialized = false;  // MPI_Init returned: the exchange itself is bounded
  bool settled = false;
  bool agreed = false;   // every rank failed alike: rank 0 printed the one line
  bool printed = false;  // this rank's own line is out
};

// Rank 0: collects the other ranks' hashes. A rank that did not fail never reports, so
// the wait is bounded; its verdict goes only to the ranks that did report.
void exchange_as_root(uint64_t mine, int size, const std::string& prefix, const std::string& message,
                      Outcome& out) {
  std::vector<uint64_t> got(size, 0);
  std::vector<MPI_Request> recvs(size - 1);
  for (int r = 1; r < size; ++r)
    MPI_Irecv(&got[r], 1, MPI_UINT64_T, r, kReportTag, MPI_COMM_WORLD, &recvs[r - 1]);
  wait_all(recvs, kCollectSeconds);
  bool all_same = true;
  std::vector<int> reported;
  for (int r = 1; r < size; ++r) {
    int done = 0;
    MPI_Test(&recvs[r - 1], &done, MPI_STATUS_IGNORE);
    if (done && recvs[r - 1] == MPI_REQUEST_NULL) reported.push_back(r);
    if (!done || got[r] != mine) all_same = false;
  }
  {
    std::lock_guard<std::mutex> lock(out.mu);
    if (out.settled) return;  // the main thread gave up on the exchange and printed
    out.settled = true;
    out.agreed = all_same;
    // Printed before the verdict goes out: once the others exit, the launcher may kill
    // this rank before a later line got out.
    if (all_same)
      std::fprintf(stderr, "titan: all %d ranks: %s\n", size, message.c_str());
    else
      std::fprintf(stderr, "titan: %s%s\n", prefix.c_str(), message.c_str());
    std::fflush(stderr);
    out.printed = true;
  }
  static int verdict;
  verdict = all_same ? 1 : 0;
  std::vector<MPI_Request> sends(reported.size());
  for (size_t i = 0; i < reported.size(); ++i)
    MPI_Isend(&verdict, 1, MPI_INT, reported[i], kVerdictTag, MPI_COMM_WORLD, &sends[i]);
  wait_all(sends, kSendSeconds);
  // The main thread exits once notified, and the launcher then ends the job: wait (bounded)
  // until the peers confirm the verdict. A completed send need not have reached its peer, and
  // a peer that never hears it waits out kVerdictSeconds and prints its own line too (seen in
  // a clean-clone test run: two lines from two ranks that failed alike, the job 1.9 s long).
  static std::vector<int> acks;
  acks.assign(reported.size(), 0);
  std::vector<MPI_Request> ack_recvs(reported.size());
  for (size_t i = 0; i < reported.size(); ++i)
    MPI_Irecv(&acks[i], 1, MPI_INT, reported[i], kAckTag, MPI_COMM_WORLD, &ack_recvs[i]);
  wait_all(ack_recvs, kSendSeconds);
  out.cv.notify_all();
}

void exchange_as_peer(uint64_t mine, Outcome& out) {
  static uint64_t report;
  static int verdict = 0;
  report = mine;
  std::vector<MPI_Request> reqs(2);
  MPI_Isend(&report, 1, MPI_UINT64_T, 0, kReportTag, MPI_COMM_WORLD, &reqs[0]);
  MPI_Irecv(&verdict, 1, MPI_INT, 0, kVerdictTag, MPI_COMM_WORLD, &reqs[1]);
  const bool heard = wait_all(reqs, kVerdictSeconds);
  if (heard) {
    static int ack = 1;
    std::vector<MPI_Request> sent(1);
    MPI_Isend(&ack, 1, MPI_INT, 0, kAckTag, MPI_COMM_WORLD, &sent[0]);
    wait_all(sent, kSendSeconds);
  }
  {
    std::lock_guard<std::mutex> lock(out.mu);
    if (out.settled) return;
    out.settled = true;
    out.agreed = heard && verdict == 1;
  }
  out.cv.notify_all();
}

}  // namespace

void abort_job_agreeing(const std::string& rank_prefix, const std::string& message, int exit_code) {
  const int size = env_int("OMPI_COMM_WORLD_SIZE", 1);
  if (size <= 1) abort_job_with_status(rank_prefix + message, exit_code);
  // Never freed: the exchange thread may still be inside MPI_Init when this process exits.
  auto* out = new Outcome;
  const uint64_t mine = std::hash<std::string>{}(message);
  std::thread([out, mine, size, rank_prefix, message] {
    try {
      ensure_mpi_initialized();
    } catch (const std::exception&) {  // no MPI: each rank speaks for itself
      std::lock_guard<std::mutex> lock(out->mu);
      out->settled = true;
      out->cv.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(out->mu);
      out->initialized = true;
    }
    out->cv.notify_all();
    int rank = -1, world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world != size) {  // not the job the environment describes: no one to compare with
      std::lock_guard<std::mutex> lock(out->mu);
      out->settled = true;
      out->cv.notify_all();
      return;
    }
    if (rank == 0)
      exchange_as_root(mine, size, rank_prefix, message, *out);
    else
      exchange_as_peer(mine, *out);
  }).detach();
  bool agreed = false, printed = false;
  {
    std::unique_lock<std::mutex> lock(out->mu);
    const auto started = [&] { return out->initialized || out->settled; };
    if (out->cv.wait_for(lock, std::chrono::duration<double>(kInitSeconds), started))
      out->cv.wait_for(lock, std::chrono::duration<double>(kVerdictSeconds + 2 * kSendSeconds),
                       [&] { return out->settled; });
    out->settled = true;  // too late for the exchange thread to print now
    agreed = out->agreed;
    printed = out->printed;
  }
  if (agreed) {
    remove_abort_dirs();
    std::fflush(stdout);
    std::fflush(stderr);
    // Every rank is exiting alike, so no MPI_Abort (and no banner of its own): the launcher
    // sees the status.
    _exit(exit_code);
  }
  if (printed) end_job(exit_code);
  abort_job_with_status(rank_prefix + message, exit_code);
}

}  // namespace titan
