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
  # every block shape: the all-sparse variant in each (2 timed steps), one of them profiled
  add_test(NAME bench:gpt_step_blocks_smoke
           COMMAND gpt_step --layers 2 --heads 2 --d-model 32 --d-ff 128 --block 16 --batch 2 --threads 1
                   --warmup 1 --steps 2 --variants all --weight-blocks 1x4,4x1,4x4,8x1,8x8,16x1 --profile all/16x1)
  set_tests_properties(bench:gpt_step_blocks_smoke PROPERTIES PASS_REGULAR_EXPRESSION
    "all/1x4 .*1x4 blocks.*all/4x1 .*all/4x4 .*all/8x1 .*all/8x8 .*all/16x1 .*Profile: all/16x1 \\(attn 70% \\+ FFN 90% sparse, 16x1 blocks\\)")
  # a shape the block kernels are not built for is an error that names it and the ones they are
  add_test(NAME bench:gpt_step_bad_block_shape COMMAND gpt_step --layers 1 --weight-blocks 4x4,3x3)
  set_tests_properties(bench:gpt_step_bad_block_shape PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "gpt_step: --weight-blocks 3x3: not a block shape \\(1x4, 4x1, 4x4, 8x1, 8x8 or 16x1\\)")
  # `--profile ""` profiles nothing (it used to be refused as an unknown variant)
  add_test(NAME bench:gpt_step_no_profile
           COMMAND gpt_step --layers 1 --heads 2 --d-model 32 --d-ff 64 --block 16 --batch 2 --threads 1
                   --warmup 1 --steps 1 --variants all --profile "")
  set_tests_properties(bench:gpt_step_no_profile PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "\\| all \\(attn" FAIL_REGULAR_EXPRESSION "Profile:|unknown variant")
  # a --profile that names no variant the run has is an error, not a run without the profile
  add_test(NAME bench:gpt_step_profile_not_run COMMAND gpt_step --layers 1 --variants all --profile all,ffn)
  set_tests_properties(bench:gpt_step_profile_not_run PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "gpt_step: --profile ffn: no such variant runs")
  # bf16 products in blocks: every sparse shape variant once more in bf16, and the named form
  add_test(NAME bench:gpt_step_blocks_bf16_smoke
           COMMAND gpt_step --layers 2 --heads 2 --d-model 32 --d-ff 128 --block 16 --batch 2 --threads 1
                   --warmup 1 --steps 2 --variants all --weight-blocks 8x8 --precision fp32,bf16 --profile all/8x8/bf16)
  set_tests_properties(bench:gpt_step_blocks_bf16_smoke PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION
    "all/8x8/bf16 .*8x8 blocks, bf16 products.*Profile: all/8x8/bf16 \\(attn 70% \\+ FFN 90% sparse, 8x8 blocks, bf16 products\\)")
  add_test(NAME bench:gpt_step_bad_block_variant COMMAND gpt_step --layers 1 --variants all/2x2)
  set_tests_properties(bench:gpt_step_bad_block_variant PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "gpt_step: variant 'all/2x2': '2x2' is not a block shape")
else()
  message(STATUS "sprig: gpt_step skipped (needs CLI11, OpenMP and the OpenMP build of OpenBLAS)")
endif()
