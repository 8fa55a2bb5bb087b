// examples/threads.hpp — the examples' --threads 0 (the default): how many OpenMP threads a
// run gets when the user does not say.
//
// One thread for a model whose step is smaller than kSmallStepWork multiply-adds: its
// parallel regions are a few microseconds of work each, so a second thread gains ~10% on a
// quiet machine and, beside another busy process, every region waits for a descheduled
// thread (64-256-256-10 at 90%, batch 128, Zen 4: 0.17 ms a step on 1 thread, 0.16 on 2;
// beside a 2-thread loop 0.17 on 1 and 0.43 median, 4.5 ms p90 on 2; docs/performance.md,
// "Threads"). Otherwise OpenMP's default (OMP_NUM_THREADS, or every core) less the cores
// other processes keep busy, at least 1: sampled from /proc/stat over 100 ms at start-up
// (Linux; elsewhere none are counted busy). Not the load average: it lags by a minute and
// counts the previous run of a script that runs examples back to back.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#if defined(__linux__)
#  include <sys/resource.h>
#  include <unistd.h>
#endif

#if defined(_OPENMP)
#  include <omp.h>
#endif

namespace examples {

// 3 products (forward, weight gradient, input gradient) x live weights x batch columns.
inline constexpr std::int64_t kSmallStepWork = std::int64_t{1} << 23;

#if defined(__linux__)
// CPU seconds this process has used, all threads (its own idle OpenMP threads spin for a
// while after a parallel region, and must not count as another process's load).
inline double own_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Cores that other processes kept busy over `window` (0 where /proc/stat cannot be read).
inline int busy_cores(int cores, std::chrono::milliseconds window = std::chrono::milliseconds(100)) {
  auto sample = [](long double& busy, long double& total) {
    std::ifstream in("/proc/stat");
    std::string line;
    if (!std::getline(in, line) || line.rfind("cpu ", 0) != 0) return false;
    std::istringstream fields(line.substr(4));
    long double v = 0;
    busy = total = 0;
    for (int k = 0; fields >> v; ++k) {  // user nice system idle iowait irq softirq steal ...
      total += v;
      if (k != 3 && k != 4) busy += v;
    }
    return total > 0;
  };
  long double b0 = 0, t0 = 0, b1 = 0, t1 = 0;
  const double own0 = own_cpu_seconds();
  if (!sample(b0, t0)) return 0;
  std::this_thread::sleep_for(window);
  if (!sample(b1, t1) || t1 <= t0) return 0;
  const double own = (own_cpu_seconds() - own0) * static_cast<double>(sysconf(_SC_CLK_TCK));  // in /proc/stat's ticks
  const double others = std::max(0.0, static_cast<double>(b1 - b0) - own);
  return static_cast<int>(std::lround(cores * others / static_cast<double>(t1 - t0)));
}

#else
inline int busy_cores(int, std::chrono::milliseconds = {}) { return 0; }
#endif

// The thread count for `requested` (> 0: that many) and a step of `step_work` multiply-adds;
// sets it for OpenMP and returns it (1 without OpenMP).
inline int choose_threads(int requested, std::int64_t step_work) {
#if defined(_OPENMP)
  int threads = requested;
  if (threads <= 0) {
    threads = omp_get_max_threads();
    if (step_work < kSmallStepWork) {
      threads = 1;
    } else {
      const int cores = omp_get_num_procs();
      threads = std::max(1, std::min(threads, cores - busy_cores(cores)));
    }
  }
  omp_set_num_threads(threads);
  return threads;
#else
  (void)requested, (void)step_work;
  return 1;
#endif
}

}  // namespace examples
