# zlib for the IDX reader's gzip path (include/sprig/data/idx.hpp is the only sprig header
# that needs it). Without zlib the IDX test still builds, with SPRIG_NO_ZLIB, and its
# gzip cases are compiled out.
if(TARGET test_data_idx)
  find_package(ZLIB)
  if(ZLIB_FOUND)
    target_link_libraries(test_data_idx PRIVATE ZLIB::ZLIB)
  else()
    message(WARNING "sprig: zlib not found; test_data_idx runs without its gzip cases")
    target_compile_definitions(test_data_idx PRIVATE SPRIG_NO_ZLIB=1)
  endif()
  # The examples' Fashion-MNIST loader (examples/fashion_mnist_data.hpp) is tested here on
  # files the test writes; the real data set only where Debian's dataset-fashion-mnist
  # package is installed (a compiled-in test case, not a skip at run time).
  target_include_directories(test_data_idx PRIVATE ${sprig_SOURCE_DIR}/examples)
  if(EXISTS /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz)
    target_compile_definitions(test_data_idx PRIVATE SPRIG_TEST_FASHION_MNIST_INSTALLED=1)
  endif()
endif()

# The text reader is tested on generated text, and on the copy of Tiny Shakespeare the
# repository ships at examples/data/ (the test case is compiled in only where it is, so a
# tree that drops the file still tests the reader).
if(TARGET test_data_text AND EXISTS ${sprig_SOURCE_DIR}/examples/data/tinyshakespeare.txt)
  target_compile_definitions(test_data_text PRIVATE
    SPRIG_TINY_SHAKESPEARE="${sprig_SOURCE_DIR}/examples/data/tinyshakespeare.txt")
endif()
