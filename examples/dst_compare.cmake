# dst_compare: Static vs SET vs RigL vs SNFS, each run a fashion_mnist process.
# (Modules are included in name order, so fashion_mnist is declared after this file: same
# conditions as fashion_mnist.cmake.)
find_package(ZLIB)
find_package(CLI11 CONFIG QUIET)
if(ZLIB_FOUND AND CLI11_FOUND)
  add_executable(dst_compare ${CMAKE_CURRENT_LIST_DIR}/dst_compare.cpp)
  target_link_libraries(dst_compare PRIVATE sprig::sprig sprig_dev_flags CLI11::CLI11)  # sprig::Error (guarded_main.hpp)
  add_dependencies(dst_compare fashion_mnist)
  if(SPRIG_BUILD_TESTS AND EXISTS /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz)
    # Two algorithms, one sparsity, one seed, a few steps: the orchestration works end to end.
    add_test(NAME example:dst_compare_smoke
             COMMAND dst_compare --algorithms static,rigl --sparsities 0.9 --seeds 1 --epochs 1
                     --out ${CMAKE_CURRENT_BINARY_DIR}/dst_compare_smoke --extra=--max-steps=40 --extra=--threads=1)
    set_tests_properties(example:dst_compare_smoke PROPERTIES LABELS example PASS_REGULAR_EXPRESSION "\\| 90% \\| rigl \\|")
  endif()
endif()
