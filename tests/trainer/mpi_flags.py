"""mpirun flags of the trainer's multi-rank test drivers: MPIRUN_FLAGS of tests/CMakeLists.txt
(which says why each is there), handed over by ctest in TITAN_TEST_MPIRUN_FLAGS
(tests/trainer/mpi_tests.cmake), so that the flags are written once."""
import os
import sys


def _flags():
    flags = os.environ.get("TITAN_TEST_MPIRUN_FLAGS", "").split()
    if not flags:
        sys.exit("tests/trainer/mpi_flags.py: TITAN_TEST_MPIRUN_FLAGS is not set: run this driver through "
                 "ctest (tests/trainer/mpi_tests.cmake sets it from MPIRUN_FLAGS), or set it to the flags "
                 "of MPIRUN_FLAGS in tests/CMakeLists.txt")
    return flags


MPI_FLAGS = _flags()
