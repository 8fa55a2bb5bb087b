# Compiles sprig's own programs (tests, benchmarks, examples) through ccache when it is
# installed and no launcher is set yet; only for a top-level build (SPRIG_CCACHE), never for
# a consumer's add_subdirectory.
#  - CCACHE_BASEDIR is the source tree and the directory is not hashed, so a fresh clone in
#    another folder hits the objects an earlier clone compiled (CI clones anew every run).
#  - -march=native is the same string on every CPU: the CPU's model and feature flags go into
#    the key through CCACHE_EXTRAFILES, so a machine whose CPU changed misses instead of
#    running another CPU's instructions.
#  - CCACHE_DISABLE=1 in the environment turns it off for one build (bench/build_time.sh).
include_guard(GLOBAL)

if(CMAKE_CXX_COMPILER_LAUNCHER)
  return()
endif()
find_program(SPRIG_CCACHE_PROGRAM ccache)
if(NOT SPRIG_CCACHE_PROGRAM)
  return()
endif()

set(_sprig_ccache_cpu "${CMAKE_BINARY_DIR}/sprig_ccache_cpu.txt")
set(_sprig_cpu "")
if(EXISTS /proc/cpuinfo)
  file(STRINGS /proc/cpuinfo _sprig_cpu REGEX "^(model name|cpu family|model|flags|Features|CPU part)[ \t]*:" LIMIT_COUNT 6)
endif()
file(CONFIGURE OUTPUT "${_sprig_ccache_cpu}" CONTENT "${_sprig_cpu}\n" @ONLY)
set(CMAKE_CXX_COMPILER_LAUNCHER
    "${CMAKE_COMMAND}" -E env "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1
    "CCACHE_EXTRAFILES=${_sprig_ccache_cpu}" "${SPRIG_CCACHE_PROGRAM}")
message(STATUS "sprig: compiling through ccache (${SPRIG_CCACHE_PROGRAM}); CCACHE_DISABLE=1 turns it off")
unset(_sprig_cpu)
unset(_sprig_ccache_cpu)
