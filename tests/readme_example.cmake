# The README's usage examples are examples/readme_training.cpp (the high-level training
# loop), examples/readme_distributed.cpp (the same, data parallel over MPI) and
# examples/readme_example.cpp (the kernel level), each built and run as a test
# (readme:training, readme:distributed under mpirun where MPI is found, readme:example; each
# program exits non-zero if what it shows goes wrong);
# readme:in_sync checks that README.md shows exactly those files and that .ci/run runs exactly
# the README's test command. This file is both the tests/ module (included by
# tests/CMakeLists.txt) and, under `cmake -P`, the script that does the checking.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  foreach(example IN ITEMS training example)
    add_executable(readme_${example} "${PROJECT_SOURCE_DIR}/examples/readme_${example}.cpp")
    target_link_libraries(readme_${example} PRIVATE sprig::sprig sprig_dev_flags)
    sprig_test_at_og(readme_${example})
    add_test(NAME readme:${example} COMMAND readme_${example})
  endforeach()
  # the data-parallel loop, under mpirun with 2 ranks, where MPI is found
  if(TARGET sprig_dist AND MPIEXEC_EXECUTABLE)
    add_executable(readme_distributed "${PROJECT_SOURCE_DIR}/examples/readme_distributed.cpp")
    target_link_libraries(readme_distributed PRIVATE sprig::dist sprig_dev_flags)
    sprig_test_at_og(readme_distributed)
    add_test(NAME readme:distributed
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:readme_distributed> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(readme:distributed PROPERTIES LABELS "readme;mpi"
      ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endif()
  add_test(NAME readme:in_sync COMMAND "${CMAKE_COMMAND}" "-DSPRIG_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
                                       -P "${CMAKE_CURRENT_LIST_FILE}")
  set_tests_properties(readme:training readme:example readme:in_sync PROPERTIES LABELS readme)
  return()
endif()

# ---- script mode ---------------------------------------------------------------------
cmake_minimum_required(VERSION 3.20)
file(READ "${SPRIG_SOURCE_DIR}/README.md" readme)

# readme_block(<begin marker> <fence> <out>): the text of the first fenced block after the
# marker line, without its fences.
function(readme_block marker fence out)
  string(FIND "${readme}" "${marker}" at)
  if(at LESS 0)
    message(FATAL_ERROR "README.md lacks the marker ${marker}")
  endif()
  string(SUBSTRING "${readme}" ${at} -1 rest)
  string(FIND "${rest}" "\n${fence}\n" open)
  if(open LESS 0)
    message(FATAL_ERROR "README.md: no ${fence} block after ${marker}")
  endif()
  string(LENGTH "\n${fence}\n" fence_length)
  math(EXPR open "${open} + ${fence_length}")
  string(SUBSTRING "${rest}" ${open} -1 rest)
  string(FIND "${rest}" "```\n" close)
  if(close LESS 0)
    message(FATAL_ERROR "README.md: the block after ${marker} is not closed")
  endif()
  string(SUBSTRING "${rest}" 0 ${close} block)
  set(${out} "${block}" PARENT_SCOPE)
endfunction()

set(failures "")

# 1. The usage examples, byte for byte.
foreach(example IN ITEMS readme_training readme_distributed readme_example)
  readme_block("<!-- BEGIN examples/${example}.cpp" "```cpp" shown)
  file(READ "${SPRIG_SOURCE_DIR}/examples/${example}.cpp" source)
  if(NOT shown STREQUAL source)
    string(APPEND failures "README.md's usage example differs from examples/${example}.cpp; copy the file into "
                           "the README block (or the other way round)\n")
  endif()
endforeach()

# 2. The quick start: exactly one command per block, and .ci/run runs the test command as
#    one of its lines, verbatim.
file(READ "${SPRIG_SOURCE_DIR}/.ci/run" ci_run)
foreach(which IN ITEMS main-job tests)
  readme_block("<!-- quickstart:${which} -->" "```sh" command)
  string(STRIP "${command}" command)
  if(command STREQUAL "" OR command MATCHES "\n")
    string(APPEND failures "README.md's quick-start block '${which}' must hold exactly one command line\n")
  elseif(which STREQUAL "tests")
    string(FIND "\n${ci_run}\n" "\n${command}\n" found)
    if(found LESS 0)
      string(APPEND failures ".ci/run does not run the README's test command as a line of its own:\n  ${command}\n")
    endif()
  endif()
endforeach()

if(failures)
  message(FATAL_ERROR "${failures}")
endif()
message(STATUS "README.md's usage examples and test command match examples/readme_*.cpp and .ci/run")
