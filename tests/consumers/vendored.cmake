# Consumer test: copy include/ into a fresh folder and compile with the bare compiler,
# `-std=c++20 -I<copy> -I<xsimd>` and nothing else (no CMake, no OpenMP, no -march).
include("${CMAKE_CURRENT_LIST_DIR}/common/driver.cmake")

set(copy "${WORK_DIR}/vendored/include")
file(COPY "${SPRIG_SOURCE_DIR}/include" DESTINATION "${WORK_DIR}/vendored")
set(flags -std=c++20 "-I${copy}")
string(REPLACE "|" ";" xsimd_dirs "${XSIMD_INCLUDE_DIRS}")
foreach(dir IN LISTS xsimd_dirs)
  list(APPEND flags "-I${dir}")
endforeach()
set(main "${CONSUMERS_DIR}/common/consumer_check.cpp")

# Every sprig header the program includes must come from the copy: a sprig installed
# elsewhere on the include path would make this test pass for nothing.
run("vendored: list headers" QUIET "${CXX_COMPILER}" ${flags} -M "${main}")
string(REGEX MATCHALL "[^ \t\r\n\\\\]*include/sprig/[^ \t\r\n\\\\]*" used "${RUN_OUTPUT}")
if(NOT used)
  message(FATAL_ERROR "the compiler listed no sprig header")
endif()
foreach(header IN LISTS used)
  cmake_path(IS_PREFIX copy "${header}" NORMALIZE inside)
  if(NOT inside)
    message(FATAL_ERROR "${header} does not come from the vendored copy ${copy}")
  endif()
endforeach()

run("vendored: compile" "${CXX_COMPILER}" ${flags} "${main}" -o "${WORK_DIR}/app")
run("vendored: run" "${WORK_DIR}/app")
