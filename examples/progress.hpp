// examples/progress.hpp — what the long-running examples report while and after they train:
// a progress line on stderr and the process's peak resident memory.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace examples {

// Progress on stderr: a bar redrawn in place on a terminal, otherwise a plain line `lines`
// times per run of `steps` (and at the last step), so logs stay short.
class ProgressBar {
public:
  explicit ProgressBar(std::int64_t lines)
      : tty_(isatty(STDERR_FILENO) != 0), lines_(std::max<std::int64_t>(1, lines)) {}

  // step is 0-based among `steps`; prefix ("epoch 2/5 ", or "") starts the line; rate is
  // printed with its unit ("ex/s", "tok/s").
  void update(const std::string& prefix, std::int64_t step, std::int64_t steps, double loss, double rate,
              const char* unit) const {
    if (silenced()) return;
    const bool last = step + 1 == steps;
    if (tty_) {
      constexpr std::int64_t width = 30;
      std::string bar(static_cast<std::size_t>(width * (step + 1) / std::max<std::int64_t>(1, steps)), '=');
      bar.resize(width, ' ');
      std::fprintf(stderr, "\r%s[%s] %lld/%lld loss %.4f %.0f %s ", prefix.c_str(), bar.c_str(),
                   static_cast<long long>(step + 1), static_cast<long long>(steps), loss, rate, unit);
      if (last) std::fputc('\n', stderr);
      std::fflush(stderr);
    } else if ((step + 1) % std::max<std::int64_t>(1, steps / lines_) == 0 || last) {
      std::fprintf(stderr, "%sstep %lld/%lld loss %.4f %.0f %s\n", prefix.c_str(), static_cast<long long>(step + 1),
                   static_cast<long long>(steps), loss, rate, unit);
    }
  }

  // From now on no ProgressBar in this process prints (the ranks of a data-parallel run but
  // rank 0).
  static void silence() noexcept { silenced() = true; }

private:
  static bool& silenced() noexcept {
    static bool s = false;
    return s;
  }
  bool tty_;
  std::int64_t lines_;
};

// Peak resident set size of this process (VmHWM of /proc/self/status) in bytes; 0 where
// /proc is missing.
inline std::int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

}  // namespace examples
