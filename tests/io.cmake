# zlib for the IDX reader's gzip path (include/sprig/io/idx.hpp is the only sprig header
# that needs it). Without zlib the IDX test still builds, with SPRIG_NO_ZLIB, and its
# gzip cases are compiled out.
if(TARGET test_io_idx)
  find_package(ZLIB)
  if(ZLIB_FOUND)
    target_link_libraries(test_io_idx PRIVATE ZLIB::ZLIB)
  else()
    message(WARNING "sprig: zlib not found; test_io_idx runs without its gzip cases")
    target_compile_definitions(test_io_idx PRIVATE SPRIG_NO_ZLIB=1)
  endif()
endif()

# The text reader's test loads Tiny Shakespeare when it is present (it is not in CI).
if(TARGET test_io_text)
  target_compile_definitions(test_io_text PRIVATE
    SPRIG_TINY_SHAKESPEARE="${sprig_SOURCE_DIR}/../shared/data/tinyshakespeare.txt")
endif()
