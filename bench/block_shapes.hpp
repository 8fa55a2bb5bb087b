// bench/block_shapes.hpp — the block shapes the benchmarks are built for, chosen by name.
#pragma once

#include <string>

namespace sprig_bench {

// Calls fn.template operator()<R, C>() for the block shape named "RxC" (1x4, 4x1, 4x4, 8x1,
// 8x8, 16x1) and returns true; false for any other name.
template <class F>
bool with_block_shape(const std::string& name, F&& fn) {
  auto one = [&]<int R, int C>() {
    if (name != std::to_string(R) + "x" + std::to_string(C)) return false;
    fn.template operator()<R, C>();
    return true;
  };
  return one.template operator()<1, 4>() || one.template operator()<4, 1>() || one.template operator()<4, 4>() ||
         one.template operator()<8, 1>() || one.template operator()<8, 8>() || one.template operator()<16, 1>();
}

}  // namespace sprig_bench
