# Consumer tests: sprig used the three ways the README promises (find_package on an
# installed copy, add_subdirectory, a copied include/), each compiling and running
# tests/consumers/common/consumer_check.cpp. Every test drives a cmake -P script that
# configures fresh trees under the build directory, so it depends on nothing in this
# build's cache but the generator and the compiler. Label: consumer (ctest -LE consumer
# skips them).

set(_sprig_consumer_args
  "-DSPRIG_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
  "-DGENERATOR=${CMAKE_GENERATOR}"
  "-DCXX_COMPILER=${CMAKE_CXX_COMPILER}"
  "-DCTEST_COMMAND=${CMAKE_CTEST_COMMAND}"
  "-DSPRIG_VERSION=${PROJECT_VERSION}")
if(CMAKE_MAKE_PROGRAM)
  list(APPEND _sprig_consumer_args "-DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}")
endif()
if(CMAKE_GENERATOR_PLATFORM)
  list(APPEND _sprig_consumer_args "-DGENERATOR_PLATFORM=${CMAKE_GENERATOR_PLATFORM}")
endif()
if(CMAKE_GENERATOR_TOOLSET)
  list(APPEND _sprig_consumer_args "-DGENERATOR_TOOLSET=${CMAKE_GENERATOR_TOOLSET}")
endif()

# The vendored build passes xsimd's include directories by hand, as a user would.
get_target_property(_sprig_xsimd_includes xsimd INTERFACE_INCLUDE_DIRECTORIES)
if(NOT _sprig_xsimd_includes)
  set(_sprig_xsimd_includes "")
endif()
string(REPLACE ";" "|" _sprig_xsimd_includes "${_sprig_xsimd_includes}")

foreach(_sprig_consumer IN ITEMS find_package add_subdirectory vendored)
  add_test(NAME consumer:${_sprig_consumer}
    COMMAND "${CMAKE_COMMAND}" ${_sprig_consumer_args}
            "-DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumers/${_sprig_consumer}"
            "-DXSIMD_INCLUDE_DIRS=${_sprig_xsimd_includes}"
            -P "${CMAKE_CURRENT_LIST_DIR}/consumers/${_sprig_consumer}.cmake")
  set_tests_properties(consumer:${_sprig_consumer} PROPERTIES LABELS consumer TIMEOUT 600)
endforeach()
unset(_sprig_consumer)
unset(_sprig_consumer_args)
unset(_sprig_xsimd_includes)
