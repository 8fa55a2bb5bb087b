# Consumer test: a project that adds the sprig source tree with add_subdirectory(); its
# CMakeLists.txt fails to configure if sprig defines anything but its interface target.
include("${CMAKE_CURRENT_LIST_DIR}/common/driver.cmake")

build_and_run_consumer(add_subdirectory "${CONSUMERS_DIR}/add_subdirectory" "-DSPRIG_SOURCE_DIR=${SPRIG_SOURCE_DIR}")
