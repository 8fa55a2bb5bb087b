# train_step: one end-to-end training step, sparse (sprig) against dense (sprig::Linear on
# OpenBLAS). Needs CLI11, OpenMP and the OpenMP build of OpenBLAS (cmake/SprigOpenBLAS.cmake;
# `ldd train_step` shows which library the loader took, and the program prints the mapped file).
find_package(CLI11 QUIET)
find_package(OpenMP QUIET COMPONENTS CXX)
include(SprigOpenBLAS)

if(TARGET sprig::openblas_openmp AND CLI11_FOUND AND OpenMP_CXX_FOUND)
  # train_step: 16-bit column indices (all layers are at most 4096 wide); train_step_i32: 32-bit
  foreach(variant IN ITEMS train_step train_step_i32)
    add_executable(${variant} ${CMAKE_CURRENT_LIST_DIR}/train_step.cpp)
    target_link_libraries(${variant} PRIVATE sprig::sprig sprig_dev_flags OpenMP::OpenMP_CXX
                          sprig::openblas_openmp)
    if(TARGET CLI11::CLI11)
      target_link_libraries(${variant} PRIVATE CLI11::CLI11)
    endif()
  endforeach()
  target_compile_definitions(train_step_i32 PRIVATE SPRIG_TRAIN_STEP_INDEX_BITS=32)
  # smoke: every phase (dense and sparse steps, SET update, profile, one memory process) runs
  foreach(variant IN ITEMS train_step train_step_i32)
    add_test(NAME bench:${variant}_smoke
             COMMAND ${variant} --models mlp,ffn --sparsities 0,0.9 --threads 1 --rounds 1 --steps-per-round 2
                     --warmup 1 --set-updates 1 --delta-t 4 --profile 0.9 --profile-steps 2 --batch 16)
  endforeach()
  # --precision fp32,bf16: every configuration also runs in bf16, as its own row beside the fp32 one
  add_test(NAME bench:train_step_bf16_smoke
           COMMAND train_step --models mlp,ffn --sparsities 0,0.9 --threads 1 --rounds 1 --steps-per-round 2
                   --warmup 1 --set-updates 1 --delta-t 4 --profile 0.9 --profile-steps 2 --batch 16
                   --precision fp32,bf16 --csv)
  set_tests_properties(bench:train_step_bf16_smoke PROPERTIES
    PASS_REGULAR_EXPRESSION
    "mlp,0,1,sprig-dense-openblas,[^\n]*\nmlp,0,1,sprig-dense/bf16,[^\n]*\nmlp,0.9,1,sprig-sparse-i16,[^\n]*\nmlp,0.9,1,sprig-sparse-i16/bf16,[^\n]*\nffn,0,1,sprig-dense-openblas,[^\n]*\nffn,0,1,sprig-dense/bf16,[^\n]*\nffn,0.9,1,sprig-sparse-i16,[^\n]*\nffn,0.9,1,sprig-sparse-i16/bf16,"
    FAIL_REGULAR_EXPRESSION "warning: .* loss is")
  # --single carries the precision into the configuration's own process
  add_test(NAME bench:train_step_single_bf16
           COMMAND train_step --single ffn,0.9,1 --precision bf16 --warmup 1 --steps-per-round 1 --set-updates 1
                   --batch 16)
  set_tests_properties(bench:train_step_single_bf16 PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION
    "layer 0 sparse 4096x1024 bf16 .*layer 2 sparse 1024x4096 bf16 .*SINGLE peak_rss_kb=")
  # a precision other than fp32 and bf16 is a command-line error that names the allowed ones
  add_test(NAME bench:train_step_bad_precision COMMAND train_step --precision fp16)
  set_tests_properties(bench:train_step_bad_precision PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "--precision: fp16 not in \\{fp32,bf16\\}")
  # block-sparse rows run in bf16 too (BlockSparseLinear on the bf16 block kernels), in their own
  # process with the precision passed on
  add_test(NAME bench:train_step_block_bf16_smoke
           COMMAND train_step --models ffn --sparsities 0.9 --block 8x8 --precision bf16 --threads 1 --rounds 1
                   --steps-per-round 2 --warmup 1 --set-updates 1 --delta-t 4 --batch 16 --csv)
  set_tests_properties(bench:train_step_block_bf16_smoke PROPERTIES TIMEOUT 120
    PASS_REGULAR_EXPRESSION "ffn,0.9,1,sprig-sparse-i16/bf16,[^\n]*\nffn,0.9,1,sprig-block8x8-i16/bf16,"
    FAIL_REGULAR_EXPRESSION "warning: .* loss is")
  add_test(NAME bench:train_step_single_block_bf16
           COMMAND train_step --single ffn,0.9,1,8x8 --precision bf16 --warmup 1 --steps-per-round 1 --set-updates 1
                   --batch 16)
  set_tests_properties(bench:train_step_single_block_bf16 PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION
    "layer 0 block 8x8 4096x1024 bf16 .*layer 2 block 8x8 1024x4096 bf16 .*SINGLE peak_rss_kb=")
else()
  message(STATUS "sprig: train_step skipped (needs CLI11, OpenMP and the OpenMP build of OpenBLAS)")
endif()

# train_step_portable: the same program with no BLAS linked (dense layers on sprig's portable
# GEMM): the time and resident memory of a process that trains only sparse models.
if(CLI11_FOUND AND OpenMP_CXX_FOUND)
  add_executable(train_step_portable ${CMAKE_CURRENT_LIST_DIR}/train_step.cpp)
  target_compile_definitions(train_step_portable PRIVATE SPRIG_TRAIN_STEP_BLAS=0)
  target_link_libraries(train_step_portable PRIVATE sprig::sprig sprig_dev_flags OpenMP::OpenMP_CXX)
  if(TARGET CLI11::CLI11)
    target_link_libraries(train_step_portable PRIVATE CLI11::CLI11)
  endif()
  add_test(NAME bench:train_step_portable_smoke
           COMMAND train_step_portable --models mlp,ffn --sparsities 0,0.9 --threads 1 --rounds 1 --steps-per-round 2
                   --warmup 1 --set-updates 1 --delta-t 4 --profile 0.9 --profile-steps 2 --batch 16)
endif()
