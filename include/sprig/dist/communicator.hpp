// sprig/dist/communicator.hpp — the communicator data-parallel training talks to: rank,
// size, in-place sum-allreduce of spans (blocking and non-blocking), all-gather, broadcast
// and barrier; and SingleProcessCommunicator, the one-rank implementation (every operation
// an identity, no MPI needed). dist/mpi_communicator.hpp implements it over MPI.
//
// Contract shared by every implementation: every rank calls the same collectives in the
// same order with the same sizes (as MPI requires); a sum-allreduce leaves the same bits on
// every rank (a data-parallel run checks it through the topology hash, dist/data_parallel.hpp);
// a request started by start_allreduce_sum is finished by wait() or wait_all() before its
// span is read or freed. One thread at a time uses a communicator. Failures throw
// sprig::Error with the operation and the implementation's own message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "../core/error.hpp"

namespace sprig::dist {

class Communicator {
public:
  virtual ~Communicator() = default;

  virtual int rank() const noexcept = 0;  // 0 .. size() - 1
  virtual int size() const noexcept = 0;  // >= 1
  // "single-process", "MPI (Open MPI 4.1.4)", ...
  virtual std::string name() const = 0;

  // data = the element-wise sum of every rank's data, on every rank. O(data).
  virtual void allreduce_sum(std::span<float> data) = 0;
  virtual void allreduce_sum(std::span<double> data) = 0;
  virtual void allreduce_sum(std::span<std::int64_t> data) = 0;

  // The same, started without waiting: returns a request id for test()/wait(). The span must
  // stay alive and untouched until the request is finished.
  virtual std::int64_t start_allreduce_sum(std::span<float> data) = 0;
  virtual std::int64_t start_allreduce_sum(std::span<double> data) = 0;
  // Whether request `id` has finished (and lets the implementation make progress on it).
  virtual bool test(std::int64_t id) = 0;
  // Finishes request `id`; a finished id may not be waited on again.
  virtual void wait(std::int64_t id) = 0;
  // Finishes every request not finished yet.
  virtual void wait_all() = 0;

  // all = every rank's `mine`, in rank order; throws ArgumentError unless
  // all.size() == size() * mine.size().
  virtual void allgather(std::span<const std::byte> mine, std::span<std::byte> all) = 0;
  // data = root's data on every rank.
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  virtual void barrier() = 0;
};

// One rank: sums and gathers of one contribution are copies of it. Deterministic, O(data)
// at most (the allreduces touch nothing).
class SingleProcessCommunicator final : public Communicator {
public:
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 1; }
  std::string name() const override { return "single-process"; }

  void allreduce_sum(std::span<float>) override {}
  void allreduce_sum(std::span<double>) override {}
  void allreduce_sum(std::span<std::int64_t>) override {}
  std::int64_t start_allreduce_sum(std::span<float>) override { return next_++; }
  std::int64_t start_allreduce_sum(std::span<double>) override { return next_++; }
  bool test(std::int64_t) override { return true; }
  void wait(std::int64_t) override {}
  void wait_all() override {}

  // Throws ArgumentError unless all.size() == mine.size().
  void allgather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    if (all.size() != mine.size())
      throw ArgumentError(sprig::detail::message("SingleProcessCommunicator::allgather: ", all.size(),
                                                 " bytes for 1 rank of ", mine.size()));
    for (std::size_t k = 0; k < mine.size(); ++k) all[k] = mine[k];
  }
  void broadcast(std::span<std::byte>, int) override {}
  void barrier() override {}

private:
  std::int64_t next_ = 0;
};

}  // namespace sprig::dist
