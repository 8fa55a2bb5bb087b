# threads_step: a small MLP's step on N threads or the examples' automatic thread choice
# (examples/threads.hpp), for bench/threads_busy_compare.sh. Needs CLI11 and OpenMP.
find_package(CLI11 QUIET)
find_package(OpenMP QUIET COMPONENTS CXX)
if(CLI11_FOUND AND OpenMP_CXX_FOUND)
  add_executable(threads_step ${CMAKE_CURRENT_LIST_DIR}/threads_step.cpp)
  target_link_libraries(threads_step PRIVATE sprig::sprig sprig_dev_flags CLI11::CLI11 OpenMP::OpenMP_CXX)
  if(SPRIG_BUILD_TESTS)
    add_test(NAME bench:threads_step_smoke COMMAND threads_step --steps 20 --warmup 2)
    set_tests_properties(bench:threads_step_smoke PROPERTIES LABELS bench
      PASS_REGULAR_EXPRESSION "THREADSTEP model=64-256-256-10 sparsity=0.900 batch=128 work=[0-9]+ threads=1 ")
  endif()
endif()
