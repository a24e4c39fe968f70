# ctest runs a GoogleTest binary one test *suite* per process (--gtest_filter=Suite.*), not one
# test per process as gtest_discover_tests does. A process of a libtorch-linked test binary
# spends about 0.6 s of CPU in libtorch's start-up before main, more than most tests take:
# 291 such tests one per process paid about 3 minutes of CPU for it on 2 cores.
#
# titan_gtest_suites(<target>): lists the suites when ctest starts (the binary must be built;
# the list is written again whenever the binary or the writer is newer than it) and adds one
# ctest test per suite, named after the suite. A suite of one test that skips shows as skipped.
# ctest's name for a failing suite names no test: its output (--output-on-failure) does.
set(TITAN_GTEST_SUITES_WRITER "${CMAKE_CURRENT_LIST_DIR}/gtest_suites_write.cmake")

function(titan_gtest_suites target)
  set(list_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  file(GENERATE OUTPUT "${include_file}" CONTENT
"if(EXISTS \"$<TARGET_FILE:${target}>\")
  if(NOT EXISTS \"${list_file}\" OR NOT \"${list_file}\" IS_NEWER_THAN \"$<TARGET_FILE:${target}>\" OR
     NOT \"${list_file}\" IS_NEWER_THAN \"${TITAN_GTEST_SUITES_WRITER}\")
    include(\"${TITAN_GTEST_SUITES_WRITER}\")
    titan_write_suite_tests(\"$<TARGET_FILE:${target}>\" \"${list_file}\" \"${CMAKE_BINARY_DIR}\")
  endif()
  include(\"${list_file}\")
else()
  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)
endif()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
