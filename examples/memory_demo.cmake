# memory_demo: the memory of a 90%-sparse 784 -> 512 layer against dense (README quick start).
add_executable(memory_demo ${CMAKE_CURRENT_LIST_DIR}/memory_demo.cpp)
target_link_libraries(memory_demo PRIVATE sprig::sprig sprig_dev_flags)
if(SPRIG_BUILD_TESTS)
  # Smoke test: the demo exits 1 if its measured bytes disagree with the README's formulas.
  add_test(NAME example:memory_demo COMMAND memory_demo)
  add_test(NAME example:memory_demo_4096 COMMAND memory_demo 4096 4096 0.9)
  # README.md's worked example quotes n = 40141 and C = 48366 slots for this seed: keep them true.
  add_test(NAME example:memory_demo_matches_readme COMMAND memory_demo)
  set_tests_properties(example:memory_demo_matches_readme PROPERTIES
    PASS_REGULAR_EXPRESSION "40141 live weights of 401408.*: 48366 slots")
  set_tests_properties(example:memory_demo example:memory_demo_4096 example:memory_demo_matches_readme
    PROPERTIES LABELS example)
endif()
