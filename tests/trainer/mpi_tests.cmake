# Multi-process checkpoint tests (included by tests/CMakeLists.txt). Each scenario launches
# several titan-train jobs (some under mpirun, one after another), so the driver runs mpirun
# itself instead of being wrapped by titan_mpi_test(); PROCESSORS keeps ctest -j honest.
set(_ckpt_driver ${CMAKE_CURRENT_LIST_DIR}/checkpoint_resume.py
    --titan-train $<TARGET_FILE:titan-train> --mpirun ${MPIEXEC_EXECUTABLE}
    --workdir ${CMAKE_BINARY_DIR}/checkpoint_tests)
foreach(scenario "exact;1" "exact;2" "reshard;4" "kill;2" "missing_shard;2")
  list(GET scenario 0 name)
  list(GET scenario 1 np)
  add_test(NAME checkpoint_${name}_np${np}
           COMMAND /usr/bin/python3 ${_ckpt_driver} ${name} ${np}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(checkpoint_${name}_np${np} PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
