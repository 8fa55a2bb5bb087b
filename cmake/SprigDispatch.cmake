# sprig_dispatch(<target>): builds <target>'s sparse kernels for SSE4.2, AVX2 + FMA and
# AVX-512, chosen at run time from the CPU (include/sprig/kernels/dispatch.hpp). <target>
# itself is compiled for the oldest CPU it must run on: give it no -march above that.
# One static library per architecture compiles dispatch_target.hpp with that
# architecture's flags; they link after <target>'s own objects, the narrowest first, and
# without link-time optimisation (dispatch_target.hpp: "Link order"). (Object libraries
# would not do: CMake puts their objects before the target's own.)
include_guard(GLOBAL)

function(sprig_dispatch target)
  if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    message(FATAL_ERROR "sprig_dispatch(${target}): runtime dispatch is for x86-64 (this is ${CMAKE_SYSTEM_PROCESSOR})")
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "sprig_dispatch(${target}): needs GCC or Clang")
  endif()
  set(flags_sse4_2 -msse4.2)
  set(flags_avx2 -mavx2 -mfma)
  set(flags_avx512 -mavx512f -mavx512cd -mavx512dq -mavx512bw -mavx512vl -mavx2 -mfma)
  foreach(arch IN ITEMS sse4_2 avx2 avx512)
    set(src "${CMAKE_CURRENT_BINARY_DIR}/sprig_dispatch/${target}_${arch}.cpp")
    file(CONFIGURE OUTPUT "${src}" CONTENT "#include <sprig/kernels/dispatch_target.hpp>\n" @ONLY)
    set(lib "${target}_sprig_${arch}")
    add_library(${lib} STATIC "${src}")
    target_link_libraries(${lib} PRIVATE sprig::sprig)
    target_compile_definitions(${lib} PRIVATE SPRIG_DISPATCH_TARGET=${arch} SPRIG_NO_ABI_GUARD)
    target_compile_options(${lib} PRIVATE ${flags_${arch}})
    set_target_properties(${lib} PROPERTIES INTERPROCEDURAL_OPTIMIZATION OFF)
    target_link_libraries(${target} PRIVATE ${lib})
  endforeach()
  target_link_libraries(${target} PRIVATE sprig::sprig)
  target_compile_definitions(${target} PRIVATE SPRIG_DISPATCH)
endfunction()
