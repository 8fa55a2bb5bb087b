// sprig/core/precision.hpp — Precision: the number format a layer's products run in.
//
//   fp32  operands and products in the layer's value type (float or double), as stored
//   bf16  weights and activations rounded to bfloat16 (core/bfloat16.hpp) for the products,
//         each product exact and every sum accumulated in float; the float weights stay the
//         master copy that the optimizer updates, DST scores and checkpoints keep
//
// parse_precision("fp32" | "bf16") reads the command-line spelling; precision_name writes it.
// Throws ArgumentError for any other text, naming it.
#pragma once

#include <string>
#include <string_view>

#include "error.hpp"

namespace sprig {

enum class Precision { fp32, bf16 };

constexpr const char* precision_name(Precision p) noexcept { return p == Precision::bf16 ? "bf16" : "fp32"; }

inline Precision parse_precision(std::string_view text) {
  if (text == "fp32") return Precision::fp32;
  if (text == "bf16") return Precision::bf16;
  throw ArgumentError(detail::message("precision '", std::string(text), "' is neither fp32 nor bf16"));
}

}  // namespace sprig
