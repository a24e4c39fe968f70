#include "collectives/mpi_runtime.h"

#include <cstdlib>
#include <mutex>

#include "collectives/watchdog.h"
#include "common/error.h"
#include "common/launcher_rank.h"

namespace titan {

namespace {
int g_provided = -1;

// A process no launcher started (a single-process run, a unit test) initializes MPI as a
// singleton. Open MPI then forks an orted daemon and waits for it, and opens UCX only to
// drop it for ob1, after UCX has timed its clock with a few hundred short sleeps: 0.37 s of
// wall time for MPI_Init + MPI_Finalize on this project's machines, 0.03 s without them. A
// lone process talks to no one, so it needs neither; a value the user set is kept.
// Nor does it need a session directory: every isolated singleton names itself job [0,1], so
// all of them share /tmp/ompi.<host>.<uid>/jf.0/1, and one that finishes removes jf.0 while
// another is creating it. Its MPI_Init then fails ("mkdir ... jf.0/1: No such file"): 2 of
// 300 runs, 6 at a time, failed so; 0 of 600 without session directories.
void prefer_isolated_singleton() {
  if (launcher_vars().rank_name || std::getenv("PMIX_RANK")) return;
  setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
  setenv("OMPI_MCA_orte_create_session_dirs", "0", 0);
  setenv("OMPI_MCA_pml", "ob1", 0);
  setenv("OMPI_MCA_osc", "^ucx", 0);
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
}  // namespace

int ensure_mpi_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      MPI_Query_thread(&g_provided);
    } else {
      prefer_isolated_singleton();
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &g_provided);
      TITAN_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed: ", mpi_error_string(rc));
      std::atexit(finalize_at_exit);
    }
    set_job_abort_hook([](int code) { MPI_Abort(MPI_COMM_WORLD, code); });
  });
  return g_provided;
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, len);
}

MpiComm::~MpiComm() {
  if (comm_ != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm_);
}

MpiComm& MpiComm::operator=(MpiComm&& other) noexcept {
  if (this != &other) {
    if (comm_ != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm_);
    comm_ = other.comm_;
    other.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

}  // namespace titan
