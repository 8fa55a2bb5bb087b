// examples/ranks.hpp — the processes an example trains on: this one alone, or every rank of
// mpirun (built with SPRIG_EXAMPLES_MPI, i.e. linked to sprig::dist), rank 0 printing; and the
// per-rank report of step time and communication at the end of a data-parallel run.
#pragma once

#include <sprig/dist/communicator.hpp>
#include <sprig/dist/data_parallel.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#if defined(SPRIG_EXAMPLES_MPI)
#  include <sprig/dist/mpi_communicator.hpp>
#endif

#include "progress.hpp"
#include "quantiles.hpp"

namespace examples {

class Ranks {
public:
  // Every rank of mpirun when `distributed` or when an MPI launcher started several ranks;
  // this process alone otherwise. On ranks other than 0 stdout goes to /dev/null and progress
  // bars are silent (their output would repeat rank 0's). Throws sprig::ArgumentError for
  // `distributed` in a build without MPI, sprig::Error if MPI fails to start.
  Ranks(int& argc, char**& argv, bool distributed, const std::string& program) {
#if defined(SPRIG_EXAMPLES_MPI)
    if (distributed || sprig::dist::MpiSession::launched_with_ranks()) {
      mpi_.emplace(argc, argv);
      world_.emplace();
      comm_ = &*world_;
      if (world_->rank() > 0) {
        if (!std::freopen("/dev/null", "w", stdout)) throw sprig::Error(program + ": cannot close stdout of a rank");
        ProgressBar::silence();
      }
    }
#else
    (void)argc, (void)argv;
    if (distributed)
      throw sprig::ArgumentError(program +
                                 ": --distributed needs a build with MPI (libopenmpi-dev; CMake target sprig::dist)");
#endif
  }
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  sprig::dist::Communicator& comm() noexcept { return *comm_; }

private:
  sprig::dist::SingleProcessCommunicator one_;
  sprig::dist::Communicator* comm_ = &one_;
#if defined(SPRIG_EXAMPLES_MPI)
  std::optional<sprig::dist::MpiSession> mpi_;
  std::optional<sprig::dist::MpiCommunicator> world_;
#endif
};

// Every rank's step time and communication, printed by rank 0: one line per rank and a DIST
// line with the medians over ranks. Collective: every rank calls it.
template <class DP>
void report_ranks(sprig::dist::Communicator& comm, const DP& dp, double train_seconds, std::int64_t steps) {
  const auto& st = dp.stats();
  const double n = static_cast<double>(std::max<std::int64_t>(1, steps));
  const double mine[5] = {
      1e3 * train_seconds / n, 1e3 * st.gradient_wait_seconds / n, 1e3 * (st.gather_seconds + st.check_seconds) / n,
      static_cast<double>(st.gradient_bytes) / static_cast<double>(std::max<std::int64_t>(1, st.steps)),
      static_cast<double>(st.gather_bytes)};
  std::vector<double> all(5 * static_cast<std::size_t>(comm.size()));
  comm.allgather(std::as_bytes(std::span<const double>(mine)), std::as_writable_bytes(std::span<double>(all)));
  std::vector<double> step_ms, comm_share;
  for (int r = 0; r < comm.size(); ++r) {
    const double* v = all.data() + 5 * r;
    std::printf(
        "rank %d: %.3f ms/step, of which %.3f ms waiting for gradient sums (%.1f%%) and %.3f ms in topology "
        "gathers and checks; %.2f MB of gradient a step, %.2f MB gathered for updates\n",
        r, v[0], v[1], 100.0 * v[1] / v[0], v[2], v[3] / 1e6, v[4] / 1e6);
    step_ms.push_back(v[0]);
    comm_share.push_back((v[1] + v[2]) / v[0]);
  }
  const auto median = [](std::vector<double> v) { return quantiles(std::move(v)).median; };
  std::printf("DIST ranks=%d ms_per_step=%.3f comm_share=%.3f gradient_bytes_per_step=%.0f\n", comm.size(),
              median(step_ms), median(comm_share), mine[3]);
}

}  // namespace examples
