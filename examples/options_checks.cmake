# example:bad_options: every option of fashion_mnist, char_gpt and dst_compare with a table of
# bad values, each run expected to fail within seconds with a message and no core dump, and each
# kind of exception caught by main (examples/scripts/bad_options.cmake). Needs no data set.
# (Modules are included in name order: this one comes after the examples it runs.)
if(SPRIG_BUILD_TESTS AND (TARGET fashion_mnist OR TARGET char_gpt OR TARGET dst_compare))
  set(_bad_options_exes "")
  foreach(_t IN ITEMS fashion_mnist char_gpt dst_compare)
    if(TARGET ${_t})
      string(TOUPPER ${_t} _var)
      list(APPEND _bad_options_exes "-D${_var}=$<TARGET_FILE:${_t}>")
    endif()
  endforeach()
  if(EXISTS /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz)
    list(APPEND _bad_options_exes -DFASHION_MNIST_DATA=ON)
  endif()
  add_test(NAME example:bad_options
           COMMAND ${CMAKE_COMMAND} ${_bad_options_exes} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/bad_options_test -DTIMEOUT=10
                   -P ${CMAKE_CURRENT_LIST_DIR}/scripts/bad_options.cmake)
  set_tests_properties(example:bad_options PROPERTIES LABELS example TIMEOUT 120)
endif()
