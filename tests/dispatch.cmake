# test_dispatch: one binary built for the x86-64 baseline with runtime dispatch
# (sprig_dispatch, cmake/SprigDispatch.cmake), run once per target with SPRIG_KERNEL_ARCH
# forcing it, and once with the automatic choice. A target this CPU cannot execute is
# reported as skipped by ctest (exit code 77), never as passed. dispatch:baseline_code
# checks the link kept no AVX copy of a function the baseline code shares.
if(SPRIG_SIMD AND NOT SPRIG_EXTRA_ARCH_FLAGS AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$"
   AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  add_executable(test_dispatch ${CMAKE_CURRENT_SOURCE_DIR}/dispatch/test_kernels.cpp)
  target_link_libraries(test_dispatch PRIVATE Catch2::Catch2WithMain)
  target_compile_options(test_dispatch PRIVATE -march=x86-64 -Wall -Wextra -Wpedantic)
  sprig_dispatch(test_dispatch)
  foreach(arch IN ITEMS sse4_2 avx2 avx512)
    add_test(NAME dispatch:${arch} COMMAND ${CMAKE_COMMAND} -E env SPRIG_KERNEL_ARCH=${arch}
             ${CMAKE_CURRENT_SOURCE_DIR}/dispatch/run_if_cpu_runs.sh ${arch} $<TARGET_FILE:test_dispatch>)
    set_tests_properties(dispatch:${arch} PROPERTIES LABELS unit SKIP_RETURN_CODE 77)
  endforeach()
  add_test(NAME dispatch:automatic COMMAND test_dispatch)
  set_tests_properties(dispatch:automatic PROPERTIES LABELS unit)
  # No function the program's baseline code may reach holds AVX instructions.
  add_test(NAME dispatch:baseline_code
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/dispatch/check_baseline_code.sh $<TARGET_FILE:test_dispatch>)
  set_tests_properties(dispatch:baseline_code PROPERTIES LABELS unit)
endif()
