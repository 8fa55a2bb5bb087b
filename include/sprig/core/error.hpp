// sprig/core/error.hpp — the exception types thrown at sprig's public boundary.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace sprig {

// Every error sprig reports derives from sprig::Error, so `catch (const sprig::Error&)`
// catches them all. Messages name the function and the offending values.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Wrong shapes: a dimension that does not match its partner.
class ShapeError : public Error {
public:
  using Error::Error;
};

// A bad argument other than a shape: out-of-range index, duplicate, bad ratio, an output
// that shares memory with an input (overlaps in core/matrix.hpp).
class ArgumentError : public Error {
public:
  using Error::Error;
};

// A file or byte stream that is missing, truncated or corrupt.
class FormatError : public Error {
public:
  using Error::Error;
};

namespace detail {

// Builds a message from any streamable parts: message("spmm: W is ", m, "x", k).
template <class... Parts>
std::string message(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

}  // namespace detail
}  // namespace sprig
