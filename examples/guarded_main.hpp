// examples/guarded_main.hpp — every example's main runs inside guarded_main, so that no example
// ends by an uncaught exception (std::terminate, abort, a core dump and the buffered output
// lost): each kind is reported on stderr as "<program>: <what>", stdout flushed first, and
// the exit code is 1.
//
// Test hook: with SPRIG_EXAMPLES_TEST_THROW set to sprig, bad_alloc, std or unknown, the
// program prints "test throw: <kind>" to stdout (unflushed) and throws that kind of exception
// from inside the guard before it parses its options (examples/scripts/bad_options.cmake
// proves so that each kind is caught and the output kept). Unset, it costs one getenv.
#pragma once

#include <sprig/core/error.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace examples {

namespace detail {

// Prints "<program>: <what>" (without repeating a "<program>: " that `what` starts with)
// after flushing stdout, so the run's output comes first and none is lost.
inline void report_error(std::string_view program, std::string_view what) noexcept {
  std::fflush(stdout);
  const std::string prefix = std::string(program) + ": ";
  if (what.substr(0, prefix.size()) == prefix) what.remove_prefix(prefix.size());
  std::fprintf(stderr, "%s%.*s\n", prefix.c_str(), static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
}

inline void test_throw() {
  const char* kind = std::getenv("SPRIG_EXAMPLES_TEST_THROW");
  if (!kind || !*kind) return;
  const std::string k = kind;
  std::printf("test throw: %s\n", kind);
  if (k == "sprig") throw sprig::ArgumentError("a sprig::Error thrown by SPRIG_EXAMPLES_TEST_THROW");
  if (k == "bad_alloc") throw std::bad_alloc();
  if (k == "std") throw std::logic_error("a std::logic_error thrown by SPRIG_EXAMPLES_TEST_THROW");
  if (k == "unknown") throw 42;
}

}  // namespace detail

// Runs body() (the whole of main: option parsing included) and returns its exit code, or 1
// after reporting any exception it lets out:
//   sprig::Error         its message (it names the call and the values)
//   std::bad_alloc       "out of memory: an allocation was too large for this machine ..."
//   std::exception       its message
//   anything else        "unknown exception"
template <class Body>
int guarded_main(std::string_view program, Body&& body) noexcept {
  try {
    try {
      detail::test_throw();
      return body();
    } catch (const sprig::Error& e) {
      detail::report_error(program, e.what());
    } catch (const std::bad_alloc& e) {
      detail::report_error(program, std::string("out of memory: an allocation was too large for this machine (") +
                                        e.what() + "); use smaller sizes (--batch, --block, widths, --eval-windows)");
    } catch (const std::exception& e) {
      detail::report_error(program, e.what());
    } catch (...) {
      detail::report_error(program, "unknown exception (not a std::exception)");
    }
  } catch (...) {  // building a message failed (out of memory): the shortest report
    std::fflush(stdout);
    std::fputs("error: an exception, and no memory left to describe it\n", stderr);
  }
  return 1;
}

}  // namespace examples
