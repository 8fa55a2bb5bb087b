# Shared by the consumer drivers (cmake -P scripts registered in tests/consumers.cmake).
# Every driver starts from an empty WORK_DIR and configures fresh build trees that see
# nothing of the parent build but the generator and compiler passed on the command line.
#
# Inputs (-D): SPRIG_SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER; optional MAKE_PROGRAM,
# GENERATOR_PLATFORM, GENERATOR_TOOLSET, CTEST_COMMAND, SPRIG_VERSION, XSIMD_INCLUDE_DIRS
# ('|'-separated).
cmake_minimum_required(VERSION 3.20)

foreach(var IN ITEMS SPRIG_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "consumer driver: -D${var}=... is required")
  endif()
endforeach()
get_filename_component(CONSUMERS_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# Arguments every fresh configure gets.
set(CONFIGURE_ARGS -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" -DCMAKE_BUILD_TYPE=Release)
if(MAKE_PROGRAM)
  list(APPEND CONFIGURE_ARGS "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(GENERATOR_PLATFORM)
  list(APPEND CONFIGURE_ARGS -A "${GENERATOR_PLATFORM}")
endif()
if(GENERATOR_TOOLSET)
  list(APPEND CONFIGURE_ARGS -T "${GENERATOR_TOOLSET}")
endif()
if(NOT CTEST_COMMAND)
  get_filename_component(_cmake_bin "${CMAKE_COMMAND}" DIRECTORY)
  set(CTEST_COMMAND "${_cmake_bin}/ctest")
endif()

# run(<step name> [QUIET] <command> [args...]): runs the command, shows what it printed
# (QUIET: only if it fails), and stops the script (failing the test) if it exits non-zero.
# RUN_OUTPUT in the caller's scope receives the combined output.
function(run step)
  set(quiet OFF)
  if(ARGV1 STREQUAL "QUIET")
    set(quiet ON)
    list(POP_FRONT ARGN)
  endif()
  list(JOIN ARGN " " shown)
  message(STATUS "[${step}] ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT quiet OR NOT rc EQUAL 0)
    message("${out}")
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[${step}] failed (exit ${rc})")
  endif()
  set(RUN_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

# Configures, builds and runs (through its CTest test) one consumer project.
function(build_and_run_consumer name source_dir)
  set(build "${WORK_DIR}/${name}-build")
  run("${name}: configure" "${CMAKE_COMMAND}" -S "${source_dir}" -B "${build}" ${CONFIGURE_ARGS} ${ARGN})
  run("${name}: build" "${CMAKE_COMMAND}" --build "${build}" --config Release)
  run("${name}: run" "${CTEST_COMMAND}" --test-dir "${build}" -C Release --output-on-failure -V)
endfunction()
