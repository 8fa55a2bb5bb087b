// examples/cli_checks.hpp — the checks every example runs on its options before any work:
// readable CLI11 validators for numbers, and the checks of paths an example will write.
//
// CLI11's own range validators print their bounds with 300 digits for a double
// (CLI::PositiveNumber on a double says "Value -1 not in range 4.94...e-324 to 1.79...e+308")
// and let NaN through every comparison (CLI::NonNegativeNumber accepts "nan"). These parse the
// text as a number (the whole text, NaN and infinities refused) and say
//   --lr: must be > 0, got -1
// CLI11 prefixes the option's name and exits non-zero (ValidationError, 105). A validator runs
// only on a value the user gave, so an option left out keeps its default, whatever sentinel
// the program uses for "not given". Integer options get the same checks, and an integer of
// 2^63 or more is refused here (CLI11 2.1 would store it silently into a 64-bit option); a
// fraction, or a value beyond a 32-bit option, is then refused by CLI11's conversion ("Could
// not convert").
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

#include <sprig/core/error.hpp>

namespace examples {

namespace detail {

// A bound as people write it: 0.9999, 1e-06, 100.
inline std::string show(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// Parses the whole of `text` as a finite number into v; otherwise returns why not.
// (As a double: every option is a double or an integer that CLI11 converts afterwards; a
// value beyond a double's range is infinite here, so "1e400" is refused, not rounded.)
inline std::string parse_finite(const std::string& text, double& v) {
  const char* begin = text.c_str();
  char* end = nullptr;
  v = std::strtod(begin, &end);
  if (end == begin || *end != '\0') return "'" + text + "' is not a number";
  if (std::isnan(v)) return "got " + text + ", which is not a number";
  if (std::isinf(v)) return "got " + text + ", which is not finite";
  // CLI11 2.1 stores an integer beyond 64 bits into an integer option without a word
  if (std::fabs(v) >= 0x1p63 && text.find_first_not_of("+-0123456789") == std::string::npos)
    return "got " + text + ", which does not fit in 64 bits";
  return {};
}

// A validator accepting finite numbers v with lo <(=) v <(=) hi; `rule` is how the help and
// the error state the condition ("> 0", "in [0, 1]").
inline CLI::Validator number_validator(double lo, bool lo_open, double hi, bool hi_open, std::string rule) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        if (std::string why = parse_finite(text, v); !why.empty())
          return "must be a finite number " + rule + "; " + why;
        const bool low_ok = lo_open ? v > lo : v >= lo;
        const bool high_ok = hi_open ? v < hi : v <= hi;
        if (!low_ok || !high_ok) return "must be " + rule + ", got " + text;
        return {};
      },
      rule);
}

}  // namespace detail

// > 0 and finite (learning rates, clipping thresholds, counts of at least 1).
inline CLI::Validator positive() { return detail::number_validator(0.0, true, HUGE_VAL, false, "> 0"); }

// >= 0 and finite (weight decay, steps between events where 0 means "never" or "only at the end").
inline CLI::Validator non_negative() { return detail::number_validator(0.0, false, HUGE_VAL, false, ">= 0"); }

// In [lo, hi] (sparsities, fractions).
inline CLI::Validator in_range(double lo, double hi) {
  return detail::number_validator(lo, false, hi, false, "in [" + detail::show(lo) + ", " + detail::show(hi) + "]");
}

// Any finite number.
inline CLI::Validator finite() { return detail::number_validator(-HUGE_VAL, false, HUGE_VAL, false, "(finite)"); }

// The most OpenMP threads an example accepts: beyond it the threads' stacks and per-thread
// scratch, not the work, decide whether the run starts at all (100000 crashed in the OpenMP
// runtime); no CPU an example targets has more hardware threads.
inline constexpr int kMaxThreads = 1024;

// --threads: 0 (choose) to kMaxThreads.
inline CLI::Validator threads_range() { return in_range(0.0, static_cast<double>(kMaxThreads)); }

// Physical memory of this machine in bytes (0 where it cannot be read).
inline double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

// A quantity of bytes as people read it: 512 MB, 1.3 GB, 1280 GB.
inline std::string show_bytes(double bytes) {
  char buf[32];
  if (bytes < 1e9)
    std::snprintf(buf, sizeof buf, "%.0f MB", bytes / 1e6);
  else if (bytes < 1e11)
    std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.0f GB", bytes / 1e9);
  return buf;
}

// What a run will hold at once, estimated from its options before anything is allocated: a
// lower bound (the named parts only), so a refusal is never wrong.
struct MemoryEstimate {
  std::string options;                                // the options that size it: "--batch 16 --block 4096"
  std::vector<std::pair<std::string, double>> parts;  // {what, bytes}
  double total() const {
    double t = 0;
    for (const auto& p : parts) t += p.second;
    return t;
  }
};

// Throws sprig::ArgumentError when the estimate exceeds this machine's physical memory (a run
// that would page for days or die of std::bad_alloc part-way), naming the parts:
//   "char_gpt: ... --batch 16 --block 20000 needs at least 217 GB (..., attention
//    probabilities 205 GB, ...); this machine has 25.3 GB of memory"
inline void require_fits_in_memory(const std::string& program, const MemoryEstimate& m,
                                   double available = physical_memory_bytes()) {
  if (available <= 0 || m.total() <= available) return;
  std::string parts;
  for (const auto& [what, bytes] : m.parts) parts += (parts.empty() ? "" : ", ") + what + " " + show_bytes(bytes);
  throw sprig::ArgumentError(program + ": " + m.options + " needs at least " + show_bytes(m.total()) + " (" + parts +
                             "); this machine has " + show_bytes(available) + " of memory");
}

// Makes CLI11 report a bad option as "<program>: --lr: must be > 0, got -1" (its own format
// lacks the program's name), with the hint to --help; the exit code stays CLI11's (non-zero).
inline void name_failures(CLI::App& app, const std::string& program) {
  app.failure_message([program](const CLI::App*, const CLI::Error& e) {
    return program + ": " + e.what() + "\nRun with --help for more information.\n";
  });
}

// Creates the directory `dir` (with its parents) if it is missing and checks that this process
// can create a file in it; otherwise throws `Err` (a sprig::Error subclass) saying
// "<program>: <option> <dir>: <why>". Run before training, so a run is never lost at its
// first checkpoint.
template <class Err>
void require_writable_dir(const std::string& program, const std::string& option, const std::string& dir) {
  const auto fail = [&](const std::string& why) { throw Err(program + ": " + option + " " + dir + ": " + why); };
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create the directory: " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) fail("not a directory");
  std::string probe = (std::filesystem::path(dir) / ".write_check.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) fail(std::string("cannot write in the directory: ") + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

// Checks that the file `path` can be written (opened for appending: it is created empty if it
// is missing, never truncated); otherwise throws `Err` saying "<program>: <option> <path>:
// cannot write: <why>". For an output that would otherwise fail only after the work.
template <class Err>
void require_writable_file(const std::string& program, const std::string& option, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) throw Err(program + ": " + option + " " + path + ": cannot write: " + std::strerror(errno));
  std::fclose(f);
}

}  // namespace examples
