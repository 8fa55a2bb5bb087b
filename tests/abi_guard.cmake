# abi_guard:link_mixed — translation units that compiled sprig for different instruction sets
# (or one with SPRIG_NO_SIMD) must fail to link (include/sprig/core/abi_guard.hpp); the same
# flags link and run. A cmake -P driver calls the compiler directly (tests/abi_guard/).
if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  get_target_property(_sprig_abi_xsimd xsimd INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT _sprig_abi_xsimd)
    set(_sprig_abi_xsimd "")
  endif()
  string(REPLACE ";" "|" _sprig_abi_xsimd "${_sprig_abi_xsimd}")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    set(_sprig_abi_x86 ON)
  else()
    set(_sprig_abi_x86 OFF)
  endif()
  add_test(NAME abi_guard:link_mixed
    COMMAND "${CMAKE_COMMAND}" "-DCXX_COMPILER=${CMAKE_CXX_COMPILER}"
            "-DSPRIG_INCLUDE=${PROJECT_SOURCE_DIR}/include"
            "-DXSIMD_INCLUDE_DIRS=${_sprig_abi_xsimd}"
            "-DX86=${_sprig_abi_x86}"
            "-DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/abi_guard"
            -P "${CMAKE_CURRENT_SOURCE_DIR}/abi_guard/link_mixed.cmake")
  set_tests_properties(abi_guard:link_mixed PROPERTIES LABELS unit TIMEOUT 300)
  unset(_sprig_abi_xsimd)
  unset(_sprig_abi_x86)
endif()
