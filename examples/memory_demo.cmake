# memory_demo: the memory of a 90%-sparse 784 -> 512 layer against dense (docs/guide.md).
add_executable(memory_demo ${CMAKE_CURRENT_LIST_DIR}/memory_demo.cpp)
target_link_libraries(memory_demo PRIVATE sprig::sprig sprig_dev_flags)
if(SPRIG_BUILD_TESTS)
  # Smoke test: the demo exits 1 if its measured bytes disagree with docs/guide.md's formulas.
  add_test(NAME example:memory_demo COMMAND memory_demo)
  add_test(NAME example:memory_demo_4096 COMMAND memory_demo 4096 4096 0.9)
  # docs/guide.md's worked example quotes n = 40141 and C = 48366 slots for this seed: keep them true.
  add_test(NAME example:memory_demo_matches_guide COMMAND memory_demo)
  set_tests_properties(example:memory_demo_matches_guide PROPERTIES
    PASS_REGULAR_EXPRESSION "40141 live weights of 401408.*: 48366 slots")
  set_tests_properties(example:memory_demo example:memory_demo_4096 example:memory_demo_matches_guide
    PROPERTIES LABELS example)
endif()
