# custom_rule: a drop/grow rule of your own in a few lines (docs/dst.md, "Writing a rule").
add_executable(custom_rule ${CMAKE_CURRENT_LIST_DIR}/custom_rule.cpp)
target_link_libraries(custom_rule PRIVATE sprig::sprig sprig_dev_flags)
if(SPRIG_BUILD_TESTS)
  # The example exits 1 unless its rule grew weights and the model learned the toy problem.
  add_test(NAME example:custom_rule COMMAND custom_rule)
  set_tests_properties(example:custom_rule PROPERTIES LABELS example)
endif()
