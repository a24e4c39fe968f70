"""mpirun flags of the trainer's multi-rank test drivers (the Python twin of MPIRUN_FLAGS in
tests/CMakeLists.txt, which says why each is there): up to 4 ranks on 2 cores over shared
memory, ob1 named so that no rank opens UCX, gloo's device thread at nice 19."""
MPI_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader,tcp",
             "--mca", "pml", "ob1", "--mca", "osc", "^ucx", "-x", "TITAN_GLOO_DEVICE_NICE=19"]
# Waiting ranks yield their core instead of spinning in MPI.
YIELD_WHEN_IDLE = ["--mca", "mpi_yield_when_idle", "1"]
