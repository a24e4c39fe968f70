# Fails when a source file includes a header of a higher layer (or of a sibling at the same
# level). Run by ctest as `layering`: cmake -DROOT=<source dir> -P check_layers.cmake
# Levels, lowest first; a folder may include its own headers and those of lower levels.
# trainer/model/hooks: the header-only interfaces the model exposes to parallel plans, below
# parallel/ so that plans implement them while the model includes nothing of parallel/.
set(levels
  "common:0" "devices:1" "collectives:2" "trainer/model/hooks:2" "parallel:3"
  "trainer/config:4" "trainer/model:4" "trainer/data:4"
  "trainer/components:5" "trainer/step:6"
  "trainer/checkpoint:7" "trainer/simulate:7" "trainer:8" "study:9")

# The folder a path belongs to: the longest entry of `levels` that prefixes it.
function(layer_of path out_folder out_level)
  set(best "")
  set(best_level -1)
  foreach(entry ${levels})
    string(REPLACE ":" ";" kv ${entry})
    list(GET kv 0 folder)
    list(GET kv 1 level)
    string(LENGTH "${folder}" len)
    string(LENGTH "${best}" best_len)
    if(path MATCHES "^${folder}/" AND len GREATER best_len)
      set(best ${folder})
      set(best_level ${level})
    endif()
  endforeach()
  set(${out_folder} "${best}" PARENT_SCOPE)
  set(${out_level} ${best_level} PARENT_SCOPE)
endfunction()

set(violations "")
file(GLOB_RECURSE sources RELATIVE ${ROOT}
     ${ROOT}/common/*.h ${ROOT}/common/*.cpp ${ROOT}/devices/*.h ${ROOT}/devices/*.cpp
     ${ROOT}/collectives/*.h ${ROOT}/collectives/*.cpp ${ROOT}/parallel/*.h ${ROOT}/parallel/*.cpp
     ${ROOT}/trainer/*.h ${ROOT}/trainer/*.cpp ${ROOT}/study/*.h ${ROOT}/study/*.cpp)
foreach(src ${sources})
  layer_of(${src} from from_level)
  file(STRINGS ${ROOT}/${src} includes REGEX "^#include \"[^\"]+\"")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header "${line}")
    layer_of(${header} to to_level)
    if(to_level LESS 0 OR to STREQUAL from)
      continue()
    endif()
    if(NOT to_level LESS from_level)
      list(APPEND violations "${src} (${from}) includes ${header} (${to})")
    endif()
  endforeach()
endforeach()

if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "layering: a lower layer includes a higher one:\n  ${text}")
endif()
list(LENGTH sources n)
message(STATUS "layering: ${n} files, every include points down")
