# Finds sprig's interface dependencies: xsimd (required) and OpenMP (optional).
include_guard(GLOBAL)

find_package(xsimd REQUIRED)
# Debian's xsimd 8.1 target names a plain `xtl` in its link interface although
# the headers sprig uses do not need it; drop it when no such target exists.
if(TARGET xsimd AND NOT TARGET xtl)
  set_property(TARGET xsimd PROPERTY INTERFACE_LINK_LIBRARIES "")
endif()

if(SPRIG_USE_OPENMP)
  find_package(OpenMP COMPONENTS CXX)
endif()
