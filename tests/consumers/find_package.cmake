# Consumer test: install sprig into a temporary prefix with `cmake --install`, move the
# prefix (the package must be relocatable), then build and run a project that uses
# find_package(sprig REQUIRED) + target_link_libraries(app sprig::sprig).
include("${CMAKE_CURRENT_LIST_DIR}/common/driver.cmake")

set(sprig_build "${WORK_DIR}/sprig-build")
set(prefix "${WORK_DIR}/install")
set(moved "${WORK_DIR}/moved-prefix")
run("sprig: configure" "${CMAKE_COMMAND}" -S "${SPRIG_SOURCE_DIR}" -B "${sprig_build}" ${CONFIGURE_ARGS}
    -DSPRIG_BUILD_TESTS=OFF -DSPRIG_BUILD_BENCHMARKS=OFF -DSPRIG_BUILD_EXAMPLES=OFF)
run("sprig: build" "${CMAKE_COMMAND}" --build "${sprig_build}" --config Release)
run("sprig: install" "${CMAKE_COMMAND}" --install "${sprig_build}" --config Release --prefix "${prefix}")

# The install holds exactly the headers (byte-identical), the package files and the licence.
file(GLOB_RECURSE source_headers RELATIVE "${SPRIG_SOURCE_DIR}/include" "${SPRIG_SOURCE_DIR}/include/*")
list(TRANSFORM source_headers PREPEND "include/")
set(expected ${source_headers} share/cmake/sprig/SprigDispatch.cmake share/cmake/sprig/sprigConfig.cmake
    share/cmake/sprig/sprigConfigVersion.cmake share/cmake/sprig/sprigTargets.cmake share/doc/sprig/LICENSE)
file(GLOB_RECURSE installed RELATIVE "${prefix}" "${prefix}/*")
list(SORT expected)
list(SORT installed)
if(NOT installed STREQUAL expected)
  set(missing ${expected})
  list(REMOVE_ITEM missing ${installed})
  set(extra ${installed})
  list(REMOVE_ITEM extra ${expected})
  message(FATAL_ERROR "installed files differ from the expected set\n  missing: ${missing}\n  unexpected: ${extra}")
endif()
foreach(header IN LISTS source_headers)
  file(SHA256 "${SPRIG_SOURCE_DIR}/${header}" want)
  file(SHA256 "${prefix}/${header}" got)
  if(NOT want STREQUAL got)
    message(FATAL_ERROR "installed ${header} differs from the source tree's")
  endif()
endforeach()
list(LENGTH installed count)
message(STATUS "installed ${count} files; headers identical to the source tree")

file(RENAME "${prefix}" "${moved}")
build_and_run_consumer(find_package "${CONSUMERS_DIR}/find_package"
  "-DCMAKE_PREFIX_PATH=${moved}" "-DSPRIG_EXPECTED_PREFIX=${moved}" "-DSPRIG_EXPECTED_VERSION=${SPRIG_VERSION}")
