# Driver of the abi_guard tests (tests/abi_guard.cmake): compiles main.cpp and other.cpp of
# this folder with the compiler directly, the way any build system would, and links them.
#   - same flags: links and runs, both translation units naming one architecture;
#   - other.cpp with SPRIG_NO_SIMD, or (x86-64) with -mavx2 -mfma: the link fails, and the
#     linker's message names the guard's switch (sprig::detail::abi::no_simd / avx2);
#   - the same mix with SPRIG_NO_ABI_GUARD in both: links (the documented opt-out).
# Inputs (-D): CXX_COMPILER, SPRIG_INCLUDE, WORK_DIR, X86 (ON/OFF), XSIMD_INCLUDE_DIRS
# ('|'-separated, may be empty).
cmake_minimum_required(VERSION 3.20)
foreach(var IN ITEMS CXX_COMPILER SPRIG_INCLUDE WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "link_mixed: -D${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(base_flags -std=c++20 -O1 "-I${SPRIG_INCLUDE}")
string(REPLACE "|" ";" xsimd_dirs "${XSIMD_INCLUDE_DIRS}")
foreach(dir IN LISTS xsimd_dirs)
  list(APPEND base_flags "-I${dir}")
endforeach()

# compile(<object> <source> [flags...])
function(compile object source)
  execute_process(COMMAND "${CXX_COMPILER}" ${base_flags} ${ARGN} -c "${CMAKE_CURRENT_LIST_DIR}/${source}"
                          -o "${WORK_DIR}/${object}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "link_mixed: compiling ${source} ${ARGN} failed:\n${out}")
  endif()
endfunction()

# link(<program> <expect: OK or a regular expression the failed link must print> objects...)
function(link program expect)
  list(TRANSFORM ARGN PREPEND "${WORK_DIR}/")
  execute_process(COMMAND "${CXX_COMPILER}" ${ARGN} -o "${WORK_DIR}/${program}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(expect STREQUAL "OK")
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "link_mixed: ${program}: the link failed, expected it to pass:\n${out}")
    endif()
    message(STATUS "${program}: linked")
  else()
    if(rc EQUAL 0)
      message(FATAL_ERROR "link_mixed: ${program}: linked, expected the guard to fail the link")
    endif()
    if(NOT out MATCHES "${expect}")
      message(FATAL_ERROR "link_mixed: ${program}: the link failed without naming the switch (${expect}):\n${out}")
    endif()
    message(STATUS "${program}: the link failed as expected:\n${out}")
  endif()
endfunction()

compile(main.o main.cpp)
compile(other.o other.cpp)
link(same_flags OK main.o other.o)
execute_process(COMMAND "${WORK_DIR}/same_flags" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "link_mixed: same_flags exited with ${rc}:\n${out}")
endif()
message(STATUS "same_flags ran: ${out}")

compile(other_no_simd.o other.cpp -DSPRIG_NO_SIMD)
link(mixed_no_simd "abi(::|[0-9]+)no_simd" main.o other_no_simd.o)

if(X86)
  compile(other_avx2.o other.cpp -mavx2 -mfma)
  link(mixed_avx2 "abi(::|[0-9]+)avx2" main.o other_avx2.o)

  compile(main_unguarded.o main.cpp -DSPRIG_NO_ABI_GUARD)
  compile(other_avx2_unguarded.o other.cpp -mavx2 -mfma -DSPRIG_NO_ABI_GUARD)
  link(mixed_unguarded OK main_unguarded.o other_avx2_unguarded.o)
endif()
