# test_simd_baseline: test_simd.cpp built for the x86-64 baseline (-march=x86-64, SSE2) without
# sprig_dev_flags' -march=native: the build a user gets without -march, whose kernels must
# say they are SSE2 and, on a CPU with AVX2 + FMA, warn (kernel_arch, kernel_arch_warning).
if(TARGET test_simd AND SPRIG_SIMD AND NOT SPRIG_EXTRA_ARCH_FLAGS
   AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  add_executable(test_simd_baseline ${CMAKE_CURRENT_SOURCE_DIR}/test_simd.cpp)
  target_link_libraries(test_simd_baseline PRIVATE sprig::sprig Catch2::Catch2WithMain)
  target_compile_options(test_simd_baseline PRIVATE -march=x86-64 -Wall -Wextra -Wpedantic)
  target_compile_definitions(test_simd_baseline PRIVATE SPRIG_TEST_BASELINE_ARCH)
  catch_discover_tests(test_simd_baseline TEST_PREFIX "test_simd_baseline:" PROPERTIES LABELS unit)
endif()
