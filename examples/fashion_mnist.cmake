# fashion_mnist: the main job (README quick start). Trains an MLP with sparse hidden layers
# on Fashion-MNIST. Needs zlib (gzip IDX files) and CLI11; the dense layers use OpenBLAS
# (the OpenMP build, so BLAS and sprig's kernels share one OpenMP runtime; Debian's default
# pthreads build spins idle threads against ours) through SPRIG_USE_CBLAS, else the
# portable GEMM.
find_package(ZLIB)
find_package(CLI11 CONFIG QUIET)
if(ZLIB_FOUND AND CLI11_FOUND)
  # two translation units of about equal compile time (fashion_mnist_run.hpp)
  add_executable(fashion_mnist ${CMAKE_CURRENT_LIST_DIR}/fashion_mnist_runs.cpp ${CMAKE_CURRENT_LIST_DIR}/fashion_mnist.cpp)
  target_link_libraries(fashion_mnist PRIVATE sprig::sprig sprig_dev_flags ZLIB::ZLIB CLI11::CLI11)
  if(SPRIG_DISPATCH)
    sprig_dispatch(fashion_mnist)
  endif()
  # data parallel under mpirun when MPI is installed (sprig::dist); one process otherwise
  if(TARGET sprig_dist)
    target_link_libraries(fashion_mnist PRIVATE sprig::dist)
    target_compile_definitions(fashion_mnist PRIVATE SPRIG_EXAMPLES_MPI=1)
  endif()
  include(SprigOpenBLAS)
  if(TARGET sprig::openblas_openmp)
    target_link_libraries(fashion_mnist PRIVATE sprig::openblas_openmp)
  else()
    message(STATUS "sprig: OpenBLAS (OpenMP build) not found; fashion_mnist uses the portable GEMM")
  endif()
else()
  message(STATUS "sprig: fashion_mnist needs zlib and CLI11; not built")
endif()

if(TARGET fashion_mnist AND SPRIG_BUILD_TESTS)
  # A missing data folder is a clean, named error (CI has no data set).
  add_test(NAME example:fashion_mnist_missing_data COMMAND fashion_mnist --data-dir /nonexistent/fashion-mnist)
  set_tests_properties(example:fashion_mnist_missing_data PROPERTIES LABELS example
                       PASS_REGULAR_EXPRESSION "fashion_mnist: load_fashion_mnist: neither")
  # A short real run where the Debian data set is installed.
  if(EXISTS /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz)
    add_test(NAME example:fashion_mnist_smoke COMMAND fashion_mnist --epochs 1 --max-steps 30 --threads 1)
    set_tests_properties(example:fashion_mnist_smoke PROPERTIES LABELS example
                         PASS_REGULAR_EXPRESSION "; kernels [a-z0-9.+]+\n.*RESULT test_accuracy=0\\.[0-9]+ weight_bytes=[0-9]+ dense_weight_bytes=[0-9]+ ms_per_step=")
    # --compare-steps times the dense and the sparse model side by side, layer by layer (a
    # LayerClock on each): a fused ReLU shows no time of its own.
    add_test(NAME example:fashion_mnist_compare_steps COMMAND fashion_mnist --sparsity 0.9 --compare-steps 3 --threads 1)
    set_tests_properties(example:fashion_mnist_compare_steps PROPERTIES LABELS example
                         PASS_REGULAR_EXPRESSION "\n  0 sparse 784x1024 +[0-9]+\\.[0-9]+/[0-9.]+ +[0-9]+\\.[0-9]+/[0-9.]+ *\n  1 relu +0\\.000/0\\.000 +0\\.000/0\\.000 *\n  2 sparse 1024x1024 [^\n]*\n  3 relu [^\n]*\n  4 dense 1024x10 [^\n]*\nSTEP_TIMES dense_ms=")
    # Block-sparse hidden layers train with SET on the block grid.
    add_test(NAME example:fashion_mnist_block_smoke
             COMMAND fashion_mnist --block 4x4 --algorithm set --delta-t 10 --epochs 1 --max-steps 30 --threads 1)
    set_tests_properties(example:fashion_mnist_block_smoke PROPERTIES LABELS example
                         PASS_REGULAR_EXPRESSION "sparse in 4x4 blocks.*topology: set.*RESULT test_accuracy=0\\.[0-9]+ weight_bytes=[0-9]+")
    # bf16 products in the sparse hidden layers train too.
    add_test(NAME example:fashion_mnist_bf16_smoke
             COMMAND fashion_mnist --precision bf16 --algorithm rigl --delta-t 10 --epochs 1 --max-steps 30 --threads 1)
    set_tests_properties(example:fashion_mnist_bf16_smoke PROPERTIES LABELS example
                         PASS_REGULAR_EXPRESSION "bf16 products.*RESULT test_accuracy=0\\.[0-9]+ weight_bytes=[0-9]+")
    add_test(NAME example:fashion_mnist_bf16_blocks_smoke
             COMMAND fashion_mnist --precision bf16 --block 4x4 --algorithm rigl --delta-t 10 --epochs 1 --max-steps 30
                     --threads 1)
    set_tests_properties(example:fashion_mnist_bf16_blocks_smoke PROPERTIES LABELS example
                         PASS_REGULAR_EXPRESSION "4x4 blocks.*bf16 products.*RESULT test_accuracy=0\\.[0-9]+ weight_bytes=[0-9]+")
    # SNFS on the block grid (RigL's and GraNet's block runs resume above).
    add_test(NAME example:fashion_mnist_block_snfs
             COMMAND fashion_mnist --block 8x1 --algorithm snfs --delta-t 10 --epochs 1 --max-steps 30 --threads 1)
    set_tests_properties(example:fashion_mnist_block_snfs PROPERTIES LABELS example
                         PASS_REGULAR_EXPRESSION "sparse in 8x1 blocks.*topology: snfs.*RESULT test_accuracy=0\\.[0-9]+ weight_bytes=[0-9]+")
    # Kill-and-resume on the block grid equals the straight run: RigL, and GraNet pruning the
    # grid from --initial-sparsity to --sparsity (weight_bytes: the pruned size).
    set(_block_resume_rigl "")
    set(_block_resume_granet ";--initial-sparsity;0.5")
    foreach(_algorithm IN ITEMS rigl granet)
      sprig_example_script_test(fashion_mnist_block_${_algorithm}_resume fashion_mnist resume_equals_straight
        DEFINES "-DARGS=--epochs;2;--max-steps;40;--threads;1;--block;4x4;--algorithm;${_algorithm}${_block_resume_${_algorithm}};--delta-t;10;--sparsity;0.8;--widths;64,64"
                -DEVERY=7 -DSTOP=53
                "-DMATCH=test loss [0-9.]+ acc [0-9.]+;RESULT test_accuracy=[0-9.]+ weight_bytes=[0-9]+")
    endforeach()
    # Constant fan-in on the block grid: every block row drawn with, and kept at, one count.
    add_test(NAME example:fashion_mnist_block_constant_fan_in
             COMMAND fashion_mnist --block 4x4 --constant-fan-in --algorithm rigl --delta-t 10 --epochs 1 --max-steps 30
                     --threads 1)
    set_tests_properties(example:fashion_mnist_block_constant_fan_in PROPERTIES LABELS example
                         PASS_REGULAR_EXPRESSION "sparse in 4x4 blocks.*topology: rigl with constant fan-in.*RESULT test_accuracy=0\\.[0-9]+")
    # Kill-and-resume equals the uninterrupted run: same accuracy and weights, RigL updates
    # and a checkpoint in between (the test loss is printed with 4 decimals; the state itself
    # is compared bitwise by test_io_checkpoint).
    sprig_example_script_test(fashion_mnist_resume fashion_mnist resume_equals_straight
      DEFINES "-DARGS=--epochs;2;--max-steps;40;--threads;1;--algorithm;rigl;--delta-t;10;--sparsity;0.9;--widths;64,64"
              -DEVERY=7 -DSTOP=53
              "-DMATCH=test loss [0-9.]+ acc [0-9.]+;RESULT test_accuracy=[0-9.]+ weight_bytes=[0-9]+")
    # The checkpoint at the end of each epoch is written with --checkpoint-every 0, and a killed
    # save's temporaries are removed at the next save (only those).
    sprig_example_script_test(fashion_mnist_checkpoint_files fashion_mnist checkpoint_files
      DEFINES "-DARGS=--epochs;1;--max-steps;10;--threads;1;--sparsity;0.9;--widths;64,64")
    # A resume refuses a change to any option that defines the model or the run, naming it and
    # both values, and accepts the options --help lists as free to change.
    sprig_example_script_test(fashion_mnist_resume_mismatch fashion_mnist resume_mismatch
      DEFINES "-DARGS=--epochs;1;--max-steps;10;--threads;1;--sparsity;0.9;--algorithm;rigl;--widths;64,64"
              "-DCHANGES=--widths|64,32|64,64;--sparsity|0.8|0.9;--distribution|erk|uniform;--block|4x4|none;--precision|bf16|fp32;--index-bits|32|16;--algorithm|set|rigl;--delta-t|20|100;--alpha|0.5|0.3;--constant-fan-in|FLAG|false|true;--optimizer|sgd|adamw;--lr|0.002|0.004;--weight-decay|0.001|0.0001;--momentum|0.8|0.9;--bias-correction|global|per-slot;--warmup-epochs|0.5|0.2;--batch|64|128;--max-steps|20|10;--epochs|2|1;--seed|2|1"
              "-DFREE=--threads|2;--checkpoint-every|3;--csv|${CMAKE_CURRENT_BINARY_DIR}/resume_mismatch_test.csv")
    # --initial-sparsity only with granet or gmp (refused with the others)
    sprig_example_script_test(fashion_mnist_resume_mismatch_granet fashion_mnist resume_mismatch
      DEFINES "-DARGS=--epochs;1;--max-steps;10;--threads;1;--sparsity;0.9;--algorithm;granet;--initial-sparsity;0.5;--widths;64,64"
              "-DCHANGES=--initial-sparsity|0.6|0.5" "-DFREE=--threads|2")
    # Data parallel under mpirun: 2 ranks train the model one process trains (to rounding),
    # and a 2-rank run killed and resumed from its checkpoint equals the straight 2-rank run.
    if(TARGET sprig_dist AND MPIEXEC_EXECUTABLE)
      set(_launch ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe ${MPIEXEC_PREFLAGS})
      sprig_example_script_test(fashion_mnist_mpi_matches_one_process fashion_mnist ranks_match_one_process
        DEFINES "-DLAUNCH=${_launch}"
                "-DARGS=--epochs;2;--max-steps;40;--threads;1;--algorithm;rigl;--delta-t;10;--sparsity;0.9;--widths;64,64"
                "-DRANKS=DIST ranks=2 " -DTOLERANCE=30
                "-DMATCH=test loss [0-9]\\.[0-9][0-9][0-9][0-9];acc 0\\.[0-9][0-9][0-9][0-9] \\|")
      sprig_example_script_test(fashion_mnist_mpi_resume fashion_mnist resume_equals_straight
        DEFINES "-DLAUNCH=${_launch}"
                "-DARGS=--epochs;2;--max-steps;40;--threads;1;--algorithm;rigl;--delta-t;10;--sparsity;0.9;--widths;64,64"
                -DEVERY=7 -DSTOP=53
                "-DMATCH=test loss [0-9.]+ acc [0-9.]+;RESULT test_accuracy=[0-9.]+ weight_bytes=[0-9]+;DIST ranks=2 ")
      set_tests_properties(example:fashion_mnist_mpi_matches_one_process example:fashion_mnist_mpi_resume PROPERTIES
        LABELS "example;mpi" ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
    endif()
  endif()
endif()
