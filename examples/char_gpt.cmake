# char_gpt: a character-level GPT on Tiny Shakespeare (examples/data), dense or with sparse
# attention / FFN projections. Needs CLI11; the head and dense projections use OpenBLAS (the
# OpenMP build, as fashion_mnist) when it is installed, else the portable GEMM.
find_package(CLI11 CONFIG QUIET)
if(CLI11_FOUND)
  add_executable(char_gpt ${CMAKE_CURRENT_LIST_DIR}/char_gpt.cpp)
  target_link_libraries(char_gpt PRIVATE sprig::sprig sprig_dev_flags CLI11::CLI11)
  target_compile_definitions(char_gpt PRIVATE CHAR_GPT_DEFAULT_DATA="${CMAKE_CURRENT_LIST_DIR}/data/tinyshakespeare.txt")
  include(SprigOpenBLAS)
  if(TARGET sprig::openblas_openmp)
    target_link_libraries(char_gpt PRIVATE sprig::openblas_openmp)
  endif()
  # --export, --import, --dump-logits: io/safetensors.hpp needs nlohmann-json (Debian
  # nlohmann-json3-dev); without it char_gpt builds and refuses those options.
  find_package(nlohmann_json 3.2 QUIET)
  if(nlohmann_json_FOUND)
    target_link_libraries(char_gpt PRIVATE nlohmann_json::nlohmann_json)
    target_compile_definitions(char_gpt PRIVATE CHAR_GPT_SAFETENSORS=1)
  endif()
  # data parallel under mpirun when MPI is installed (sprig::dist); one process otherwise
  if(TARGET sprig_dist)
    target_link_libraries(char_gpt PRIVATE sprig::dist)
    target_compile_definitions(char_gpt PRIVATE SPRIG_EXAMPLES_MPI=1)
  endif()
else()
  message(STATUS "sprig: char_gpt needs CLI11; not built")
endif()

if(TARGET char_gpt AND SPRIG_BUILD_TESTS)
  # A tiny model for a few steps: the whole loop (RigL, clipping, validation, sampling) runs.
  set(CHAR_GPT_TINY --layers 2 --heads 2 --d-model 32 --d-ff 64 --block 32 --batch 4 --eval-windows 8 --threads 1
                    --attn-sparsity 0.5 --ffn-sparsity 0.8 --algorithm rigl --delta-t 10 --sample 40)
  add_test(NAME example:char_gpt_smoke COMMAND char_gpt ${CHAR_GPT_TINY} --steps 30 --eval-every 10)
  set_tests_properties(example:char_gpt_smoke PROPERTIES LABELS example
                       PASS_REGULAR_EXPRESSION "peak RSS [0-9]+\ntraining: 30 steps in [0-9.]+ s, [0-9.]+ ms a step \\(median [0-9.]+ ms, first step [0-9.]+ ms\\).*RESULT val_loss=[0-9.]+ ms_per_step=[0-9.]+ weight_bytes=[0-9]+ dense_weight_bytes=[0-9]+ tokens_per_s=.* median_ms_per_step=[0-9.]+")
  # --profile: every phase of the step, then the loss, clipping with the optimizer, RigL's topology
  # updates and the rest (none negative).
  add_test(NAME example:char_gpt_profile COMMAND char_gpt ${CHAR_GPT_TINY} --steps 12 --eval-every 6 --profile)
  set_tests_properties(example:char_gpt_profile PROPERTIES LABELS example
                       PASS_REGULAR_EXPRESSION "profile: where a training step's time goes \\(mean over 12 steps, [0-9.]+ ms a step\\):\n  embeddings forward [^\n]* [0-9.]+ ms +[0-9.]+%\n(  [^\n]* [0-9.]+ ms +[0-9.]+%\n)+  embeddings backward \\(scatter-add\\) +[0-9.]+ ms +[0-9.]+%\n  loss [^\n]* [0-9.]+ ms +[0-9.]+%\n  clipping and the optimizer +[0-9.]+ ms +[0-9.]+%\n  topology updates +[0-9.]+ ms +[0-9.]+%\n  data and the rest +[0-9.]+ ms +[0-9.]+%\n")
  add_test(NAME example:char_gpt_profile_no_steps COMMAND char_gpt ${CHAR_GPT_TINY} --eval-only --profile)
  set_tests_properties(example:char_gpt_profile_no_steps PROPERTIES LABELS example
                       PASS_REGULAR_EXPRESSION "profile: no training step ran, nothing to profile")
  # The same loop with the projections in dense 4x4 blocks (RigL on the block grid).
  add_test(NAME example:char_gpt_blocks_smoke COMMAND char_gpt ${CHAR_GPT_TINY} --weight-blocks 4x4 --steps 30 --eval-every 10)
  set_tests_properties(example:char_gpt_blocks_smoke PROPERTIES LABELS example
                       PASS_REGULAR_EXPRESSION "in 4x4 blocks.*topology: rigl.*RESULT val_loss=[0-9.]+ ms_per_step=")
  # The same loop with bf16 products in the sparse projections (float masters), unstructured
  # and in 8x8 blocks, GPT-2's initialisation in the second.
  add_test(NAME example:char_gpt_bf16_smoke COMMAND char_gpt ${CHAR_GPT_TINY} --precision bf16 --steps 30 --eval-every 10)
  set_tests_properties(example:char_gpt_bf16_smoke PROPERTIES LABELS example
                       PASS_REGULAR_EXPRESSION "bf16 products.*topology: rigl.*RESULT val_loss=[0-9.]+ ms_per_step=")
  add_test(NAME example:char_gpt_bf16_blocks_smoke
           COMMAND char_gpt ${CHAR_GPT_TINY} --precision bf16 --weight-blocks 8x8 --init gpt2 --steps 30 --eval-every 10)
  set_tests_properties(example:char_gpt_bf16_blocks_smoke PROPERTIES LABELS example
                       PASS_REGULAR_EXPRESSION "in 8x8 blocks, 32-bit indices, bf16 products.*topology: rigl.*RESULT val_loss=[0-9.]+ ms_per_step=")
  # Every other block shape the block kernels are built for: 2 steps, RigL updating the block
  # grid at each (--delta-t 1), validation and sampling in that shape.
  foreach(_shape IN ITEMS 1x4 4x1 8x1 8x8 16x1)
    add_test(NAME example:char_gpt_blocks_${_shape}
             COMMAND char_gpt --layers 2 --heads 2 --d-model 32 --d-ff 64 --block 32 --batch 4 --eval-windows 8
                     --threads 1 --attn-sparsity 0.5 --ffn-sparsity 0.8 --algorithm rigl --delta-t 1 --sample 8
                     --weight-blocks ${_shape} --steps 2 --eval-every 1)
    set_tests_properties(example:char_gpt_blocks_${_shape} PROPERTIES LABELS example
                         PASS_REGULAR_EXPRESSION "in ${_shape} blocks.*topology: rigl.*topology updates: [1-9].*RESULT val_loss=[0-9.]+ ms_per_step=")
  endforeach()
  # The key/value cache draws the same characters as the full window per token, past the
  # block size too (--sample 80 > --block 32), greedy and at temperature 0.8 (the default).
  sprig_example_script_test(char_gpt_sample_cache char_gpt sample_cache_matches
    DEFINES "-DARGS=--layers;2;--heads;2;--d-model;32;--d-ff;64;--block;32;--batch;4;--eval-windows;8;--threads;1;--attn-sparsity;0.5;--ffn-sparsity;0.8;--steps;20;--eval-every;0;--sample;80")
  sprig_example_script_test(char_gpt_sample_cache_greedy char_gpt sample_cache_matches
    DEFINES "-DARGS=--layers;2;--heads;2;--d-model;32;--d-ff;64;--block;32;--batch;4;--eval-windows;8;--threads;1;--weight-blocks;4x4;--ffn-sparsity;0.8;--steps;20;--eval-every;0;--sample;80;--temperature;0")
  # Models in and out: export, import (the same loss back), pruning on import, the compressed
  # form back, and files that do not fit the model refused with the tensor named.
  if(nlohmann_json_FOUND)
    sprig_example_script_test(char_gpt_model_files char_gpt model_files
      DEFINES "-DARGS=--heads;2;--block;32;--batch;4;--eval-windows;8;--threads;1;--sample;0")
  endif()
  # SNFS moves 8x8 blocks between the sparse projections (attention and FFN alike).
  add_test(NAME example:char_gpt_blocks_snfs
           COMMAND char_gpt --layers 2 --heads 2 --d-model 32 --d-ff 64 --block 32 --batch 4 --threads 1
                   --attn-sparsity 0.5 --ffn-sparsity 0.8 --weight-blocks 8x8 --algorithm snfs --delta-t 2 --steps 6
                   --eval-every 0 --sample 0)
  set_tests_properties(example:char_gpt_blocks_snfs PROPERTIES LABELS example
                       PASS_REGULAR_EXPRESSION "snfs.*step 6")
  # GraNet and gmp prune each sparse group from --initial-sparsity to its own along the cubic
  # schedule (updates at steps 0, 10, 20, 30): at the end fc and fc_proj hold live_count(2048,
  # 0.8) = 410 weights each (1 - 820/4096 = 79.9805% sparse), in 4x4 blocks live_count(128, 0.8)
  # = 26 of each grid's 128 blocks (1 - 52/256 = 79.6875%); attention ends at 50%.
  set(CHAR_GPT_TINY_PRUNED --layers 2 --heads 2 --d-model 32 --d-ff 64 --block 32 --batch 4 --eval-windows 8
                           --threads 1 --attn-sparsity 0.5 --ffn-sparsity 0.8 --initial-sparsity 0.3 --delta-t 10)
  add_test(NAME example:char_gpt_granet
           COMMAND char_gpt ${CHAR_GPT_TINY_PRUNED} --algorithm granet --steps 40 --eval-every 20 --sample 0)
  set_tests_properties(example:char_gpt_granet PROPERTIES LABELS example
                       PASS_REGULAR_EXPRESSION "topology: granet, each sparse group from 0.3 sparse to its own along the cubic schedule.*topology updates: 4,.*\nsparsity now: attention 50%, FFN 79.9805%\n")
  add_test(NAME example:char_gpt_blocks_gmp
           COMMAND char_gpt ${CHAR_GPT_TINY_PRUNED} --algorithm gmp --weight-blocks 4x4 --steps 40 --eval-every 20 --sample 0)
  set_tests_properties(example:char_gpt_blocks_gmp PROPERTIES LABELS example
                       PASS_REGULAR_EXPRESSION "in 4x4 blocks.*topology: gmp, .*topology updates: 4,.*\nsparsity now \\(of the block grid\\): attention 50%, FFN 79.6875%\n")
  # A GraNet run killed between its updates and resumed equals the straight run.
  sprig_example_script_test(char_gpt_granet_resume char_gpt resume_equals_straight
    DEFINES "-DARGS=${CHAR_GPT_TINY_PRUNED};--algorithm;granet;--sample;40;--steps;40;--eval-every;20" -DEVERY=7 -DSTOP=23
            "-DRESUMED=resumed from .* at step 21" "-DMATCH=val loss [0-9.]+" "-DFROM=sample (temperature"
            "-DUNTIL=weights ")
  add_test(NAME example:char_gpt_missing_data COMMAND char_gpt --data /nonexistent/text.txt --steps 1)
  set_tests_properties(example:char_gpt_missing_data PROPERTIES LABELS example
                       PASS_REGULAR_EXPRESSION "char_gpt: read_char_text: cannot open '/nonexistent/text.txt'")
  # Kill-and-resume equals the uninterrupted run: the same validation losses and sample.
  sprig_example_script_test(char_gpt_resume char_gpt resume_equals_straight
    DEFINES "-DARGS=${CHAR_GPT_TINY};--steps;40;--eval-every;20" -DEVERY=7 -DSTOP=23
            "-DRESUMED=resumed from .* at step 21" "-DMATCH=val loss [0-9.]+" "-DFROM=sample (temperature"
            "-DUNTIL=weights ")
  # A run saved with 32-bit indices resumes under the default --index-bits auto (which would pick
  # 16 for a new run) with its own width, and equals the straight run.
  sprig_example_script_test(char_gpt_resume_keeps_index_bits char_gpt resume_equals_straight
    DEFINES "-DARGS=${CHAR_GPT_TINY};--index-bits;32;--steps;20;--eval-every;10" -DEVERY=7 -DSTOP=9
            -DRESUME_WITHOUT=--index-bits "-DRESUMED=resumed from .* at step 7" "-DMATCH=val loss [0-9.]+")
  # A bf16 run killed and resumed equals the straight bf16 run (the float masters are the state).
  sprig_example_script_test(char_gpt_bf16_resume char_gpt resume_equals_straight
    DEFINES "-DARGS=${CHAR_GPT_TINY};--precision;bf16;--steps;40;--eval-every;20" -DEVERY=7 -DSTOP=23
            "-DRESUMED=resumed from .* at step 21" "-DMATCH=val loss [0-9.]+" "-DFROM=sample (temperature"
            "-DUNTIL=weights ")
  # Data parallel under mpirun: 2 ranks train what one process trains (to rounding), and a
  # 2-rank run killed and resumed equals the straight 2-rank run, sample included.
  if(TARGET sprig_dist AND MPIEXEC_EXECUTABLE)
    set(_launch ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe ${MPIEXEC_PREFLAGS})
    sprig_example_script_test(char_gpt_mpi_matches_one_process char_gpt ranks_match_one_process
      DEFINES "-DLAUNCH=${_launch}" "-DARGS=${CHAR_GPT_TINY};--steps;40;--eval-every;20" "-DRANKS=DIST ranks=2 "
              -DTOLERANCE=30 "-DMATCH=val loss [0-9]\\.[0-9][0-9][0-9][0-9]")
    sprig_example_script_test(char_gpt_mpi_resume char_gpt resume_equals_straight
      DEFINES "-DLAUNCH=${_launch}" "-DARGS=${CHAR_GPT_TINY};--steps;40;--eval-every;20" -DEVERY=7 -DSTOP=23
              "-DRESUMED=resumed from .* at step 21" "-DMATCH=val loss [0-9.]+;DIST ranks=2 "
              "-DFROM=sample (temperature" "-DUNTIL=weights ")
    set_tests_properties(example:char_gpt_mpi_matches_one_process example:char_gpt_mpi_resume PROPERTIES
      LABELS "example;mpi" ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endif()
endif()

if(TARGET char_gpt AND SPRIG_BUILD_TESTS)
  # --checkpoint-every 0 writes the checkpoint at the end, and a killed save's temporaries are
  # removed at the next save (only those).
  sprig_example_script_test(char_gpt_checkpoint_files char_gpt checkpoint_files
    DEFINES "-DARGS=${CHAR_GPT_TINY};--steps;6;--eval-every;0")
  # A resume refuses a change to any option that defines the model or the run, naming it and
  # both values, and accepts the options --help lists as free to change.
  sprig_example_script_test(char_gpt_resume_mismatch char_gpt resume_mismatch
    DEFINES "-DARGS=${CHAR_GPT_TINY};--steps;12;--eval-every;0"
            "-DCHANGES=--layers|3|2;--heads|4|2;--d-model|64|32;--d-ff|128|64;--block|16|32;--batch|8|4;--attn-sparsity|0.7|0.5;--ffn-sparsity|0.9|0.8;--distribution|erk|uniform;--weight-blocks|4x4|none;--precision|bf16|fp32;--index-bits|32|16;--algorithm|set|rigl;--delta-t|20|10;--alpha|0.5|0.3;--bias-correction|global|per-slot;--lr|0.002|0.001;--min-lr|0.0002|0.0001;--warmup|50|100;--weight-decay|0.2|0.1;--clip|0.5|1;--steps|16|12;--seed|2|1;--data|OTHER_TEXT|a text of 1115394 characters, vocabulary 65|a text of 2280 characters, vocabulary 8"
            "-DFREE=--threads|2;--eval-every|5;--eval-windows|4;--checkpoint-every|3;--sample|10;--temperature|0.5;--prompt|T")
  # --initial-sparsity is a setting of granet and gmp runs only (refused with the others)
  sprig_example_script_test(char_gpt_resume_mismatch_granet char_gpt resume_mismatch
    DEFINES "-DARGS=${CHAR_GPT_TINY_PRUNED};--algorithm;granet;--steps;12;--eval-every;0;--sample;0"
            "-DCHANGES=--initial-sparsity|0.4|0.3" "-DFREE=--threads|2")
endif()
