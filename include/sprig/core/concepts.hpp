// sprig/core/concepts.hpp — the value and index types sprig is instantiated with.
#pragma once

#include <concepts>
#include <cstdint>

namespace sprig {

// Weight/activation type: float or double.
template <class T>
concept Value = std::same_as<T, float> || std::same_as<T, double>;

// Column index type: a signed integer so that -1 can mark a padding slot.
template <class I>
concept ColumnIndex = std::same_as<I, std::int16_t> || std::same_as<I, std::int32_t> || std::same_as<I, std::int64_t>;

}  // namespace sprig
