# nlohmann-json for the safetensors reader and writer (include/sprig/io/safetensors.hpp and its
# io/safetensors_*.hpp parts are the only sprig headers that need it: Debian nlohmann-json3-dev).
# Without it the safetensors test still builds, with SPRIG_NO_NLOHMANN_JSON, as one case that
# says so.
if(TARGET test_io_safetensors)
  find_package(nlohmann_json 3.2 QUIET)
  if(nlohmann_json_FOUND)
    target_link_libraries(test_io_safetensors PRIVATE nlohmann_json::nlohmann_json)
    # Files written by Python's safetensors package (tests/data/make_safetensors_fixtures.py).
    target_compile_definitions(test_io_safetensors PRIVATE SPRIG_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
  else()
    message(WARNING "sprig: nlohmann-json not found; test_io_safetensors runs without its cases")
    target_compile_definitions(test_io_safetensors PRIVATE SPRIG_NO_NLOHMANN_JSON=1)
  endif()
endif()
