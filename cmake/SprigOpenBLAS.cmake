# Finds the OpenMP build of OpenBLAS (Debian: libopenblas-openmp-dev) for sprig's own tests,
# benchmarks and examples, and defines the target sprig::openblas_openmp (headers, library by
# full path, SPRIG_USE_CBLAS=1 SPRIG_OPENBLAS=1) when it is there; nothing when it is not.
# Only the OpenMP build: the pthreads build's idle workers spin after each call and fight
# sprig's OpenMP kernels for the cores. The library is linked by full path, so its folder goes
# into the build RPATH and the loader takes this build, not whatever the libopenblas.so.0
# alternative points to.
include_guard(GLOBAL)

find_library(SPRIG_OPENBLAS_OPENMP_LIBRARY NAMES openblas
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp /usr/lib/openblas-openmp
  NO_DEFAULT_PATH)
find_path(SPRIG_OPENBLAS_OPENMP_INCLUDE_DIR cblas.h
  PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp /usr/include/openblas-openmp
  NO_DEFAULT_PATH)

if(SPRIG_OPENBLAS_OPENMP_LIBRARY AND SPRIG_OPENBLAS_OPENMP_INCLUDE_DIR AND NOT TARGET sprig::openblas_openmp)
  add_library(sprig::openblas_openmp INTERFACE IMPORTED GLOBAL)
  set_target_properties(sprig::openblas_openmp PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${SPRIG_OPENBLAS_OPENMP_INCLUDE_DIR}"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${SPRIG_OPENBLAS_OPENMP_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${SPRIG_OPENBLAS_OPENMP_LIBRARY}"
    INTERFACE_COMPILE_DEFINITIONS "SPRIG_USE_CBLAS=1;SPRIG_OPENBLAS=1")
endif()
