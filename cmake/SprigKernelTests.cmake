# The kernel tests: test_<name> for every include/sprig/kernels/<name>.hpp that has a
# tests/test_<name>.cpp (the oracle test among them), and test_nn_<name> for every
# include/sprig/nn/<name>.hpp that runs xsimd code of its own (it includes kernels/simd.hpp:
# GELU, bias, the portable GEMM). They test the optimised code path: tests/CMakeLists.txt
# builds them at the build type's level, and the portability legs build and run them.
#   include(SprigKernelTests)                      sets SPRIG_KERNEL_TESTS
#   cmake -DSPRIG_SOURCE_DIR=. -P cmake/SprigKernelTests.cmake   prints them, one per line
if(CMAKE_SCRIPT_MODE_FILE)
  cmake_minimum_required(VERSION 3.20)
  set(_sprig_root "${SPRIG_SOURCE_DIR}")
  set(_sprig_glob_options "")
else()
  set(_sprig_root "${PROJECT_SOURCE_DIR}")
  set(_sprig_glob_options CONFIGURE_DEPENDS)  # a new kernel header reconfigures the build
endif()

set(SPRIG_KERNEL_TESTS "")
file(GLOB _sprig_headers ${_sprig_glob_options} "${_sprig_root}/include/sprig/kernels/*.hpp")
foreach(h IN LISTS _sprig_headers)
  get_filename_component(n "${h}" NAME_WE)
  if(EXISTS "${_sprig_root}/tests/test_${n}.cpp")
    list(APPEND SPRIG_KERNEL_TESTS test_${n})
  endif()
endforeach()
if(NOT "test_reference" IN_LIST SPRIG_KERNEL_TESTS)
  list(APPEND SPRIG_KERNEL_TESTS test_reference)
endif()
file(GLOB _sprig_headers ${_sprig_glob_options} "${_sprig_root}/include/sprig/nn/*.hpp")
foreach(h IN LISTS _sprig_headers)
  get_filename_component(n "${h}" NAME_WE)
  file(STRINGS "${h}" _sprig_simd REGEX "#include \"../kernels/simd.hpp\"")
  if(_sprig_simd AND EXISTS "${_sprig_root}/tests/test_nn_${n}.cpp")
    list(APPEND SPRIG_KERNEL_TESTS test_nn_${n})
  endif()
endforeach()
unset(_sprig_headers)
unset(_sprig_simd)
unset(_sprig_root)
unset(_sprig_glob_options)

if(CMAKE_SCRIPT_MODE_FILE)
  list(JOIN SPRIG_KERNEL_TESTS "\n" _sprig_lines)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E echo "${_sprig_lines}")
endif()
