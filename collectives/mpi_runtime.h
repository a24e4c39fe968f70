// MPI process state: MPI_Init_thread once per process, MPI_Finalize at exit, and MpiComm,
// the RAII owner of an MPI_Comm. Used by the mpi backend and by bench/ for raw MPI loops.
#pragma once

#include <mpi.h>

#include <string>

namespace titan {

// Initializes MPI with MPI_THREAD_MULTIPLE on first use (later calls do nothing), installs
// MPI_Abort as the job abort hook and registers MPI_Finalize to run at process exit.
// Returns the provided thread level.
int ensure_mpi_initialized();
bool mpi_finalized();
std::string mpi_error_string(int code);

class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {}
  ~MpiComm();
  MpiComm(MpiComm&& other) noexcept : comm_(other.comm_) { other.comm_ = MPI_COMM_NULL; }
  MpiComm& operator=(MpiComm&& other) noexcept;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace titan
