# Run by ctest (script mode) through the include file cmake/gtest_suites.cmake generates:
# writes one add_test per GoogleTest suite of a binary into a ctest file.
function(titan_write_suite_tests exe out workdir)
  execute_process(COMMAND "${exe}" --gtest_list_tests WORKING_DIRECTORY "${workdir}" TIMEOUT 60
                  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${exe} --gtest_list_tests failed (${rc}):\n${listing}${errors}")
  endif()
  # Suite lines are flush left and end in "." (typed suites add "  # TypeParam = ..."); their
  # tests follow, indented. gtest_main's "Running main() from ..." line matches neither.
  string(REPLACE ";" "," listing "${listing}")
  string(REPLACE "\n" ";" lines "${listing}")
  set(content "")
  set(suite "")
  set(tests 0)
  foreach(line IN LISTS lines ITEMS "END.")
    if(line MATCHES "^([^ #][^ ]*)\\.(  #.*)?$")
      if(NOT suite STREQUAL "")
        string(APPEND content
               "add_test([=[${suite}]=] \"${exe}\" [=[--gtest_filter=${suite}.*]=])\n"
               "set_tests_properties([=[${suite}]=] PROPERTIES WORKING_DIRECTORY \"${workdir}\"\n"
               "  TIMEOUT 900 LABELS unit")
        if(tests EQUAL 1)
          string(APPEND content " SKIP_REGULAR_EXPRESSION [==[\\[  SKIPPED \\]]==]")
        endif()
        string(APPEND content ")\n")
      endif()
      set(suite "${CMAKE_MATCH_1}")
      set(tests 0)
    elseif(line MATCHES "^  [^ ]")
      math(EXPR tests "${tests} + 1")
    endif()
  endforeach()
  if(content STREQUAL "")
    message(FATAL_ERROR "${exe} --gtest_list_tests listed no test suite:\n${listing}")
  endif()
  file(WRITE "${out}" "${content}")
endfunction()
