# gpt_step: one GPT training step (forward, sequence loss, backward, global-norm clipping,
# AdamW) dense, FFN-sparse and all-sparse, with a phase profile of the sparse steps. Needs
# CLI11, OpenMP and the OpenMP build of OpenBLAS (the dense projections and the head run
# cblas_sgemm through kernels/dense_gemm.hpp); 16- and 32-bit column indices in one binary (--index-bits).
find_package(CLI11 QUIET)
find_package(OpenMP QUIET COMPONENTS CXX)
include(SprigOpenBLAS)

if(TARGET sprig::openblas_openmp AND CLI11_FOUND AND OpenMP_CXX_FOUND)
  add_executable(gpt_step ${CMAKE_CURRENT_LIST_DIR}/gpt_step.cpp)
  target_link_libraries(gpt_step PRIVATE sprig::sprig sprig_dev_flags OpenMP::OpenMP_CXX sprig::openblas_openmp)
  if(TARGET CLI11::CLI11)
    target_link_libraries(gpt_step PRIVATE CLI11::CLI11)
  endif()
  # smoke: every variant, both index widths' code paths, the profile and the CSV, on a tiny GPT
  add_test(NAME bench:gpt_step_smoke
           COMMAND gpt_step --layers 2 --heads 2 --d-model 32 --d-ff 128 --block 16 --batch 2 --threads 1
                   --warmup 1 --steps 2 --index-bits 16 --csv ${CMAKE_CURRENT_BINARY_DIR}/gpt_step_smoke.csv)
else()
  message(STATUS "sprig: gpt_step skipped (needs CLI11, OpenMP and the OpenMP build of OpenBLAS)")
endif()
