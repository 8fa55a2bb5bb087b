// examples/kernel_label.hpp — what the examples' header lines say about the kernels: the
// architecture they were compiled for (sprig::kernel_arch()) and, where the build is below
// what this CPU runs, sprig::kernel_arch_warning()'s sentence beside it.
#pragma once

#include <string>

#include <sprig/kernels/simd.hpp>

namespace examples {

inline std::string kernel_label() {
  std::string label = std::string("kernels ") + sprig::kernel_arch();
  if (const std::string warning = sprig::kernel_arch_warning(); !warning.empty())
    label += " (warning: " + warning + ")";
  return label;
}

}  // namespace examples
