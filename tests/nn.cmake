# The dense GEMM (include/sprig/nn/gemm.hpp) has two paths: portable loops (every test)
# and CBLAS when SPRIG_USE_CBLAS is defined. test_nn_gemm_cblas builds the gemm test a
# second time against OpenBLAS (the OpenMP build, see DESIGN.md) when it is installed.
if(TARGET test_nn_gemm)
  find_library(SPRIG_OPENBLAS_OPENMP openblas
    PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
    NO_DEFAULT_PATH)
  find_path(SPRIG_OPENBLAS_OPENMP_INCLUDE cblas.h
    PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
    NO_DEFAULT_PATH)
  if(SPRIG_OPENBLAS_OPENMP AND SPRIG_OPENBLAS_OPENMP_INCLUDE)
    add_executable(test_nn_gemm_cblas ${CMAKE_CURRENT_SOURCE_DIR}/test_nn_gemm.cpp)
    target_link_libraries(test_nn_gemm_cblas PRIVATE sprig::sprig sprig_dev_flags Catch2::Catch2WithMain
                          ${SPRIG_OPENBLAS_OPENMP})
    target_include_directories(test_nn_gemm_cblas PRIVATE ${SPRIG_OPENBLAS_OPENMP_INCLUDE})
    target_compile_definitions(test_nn_gemm_cblas PRIVATE SPRIG_USE_CBLAS=1)
    catch_discover_tests(test_nn_gemm_cblas TEST_PREFIX "test_nn_gemm_cblas:" PROPERTIES LABELS unit)
  endif()
endif()
