// sprig/dist/mpi_communicator.hpp — Communicator over MPI (dist/communicator.hpp). The only
// sprig header that includes <mpi.h>: link the consumer with MPI (CMake: sprig::dist, which
// brings MPI::MPI_CXX). Nothing else in sprig needs MPI.
//
//     sprig::dist::MpiSession mpi(argc, argv);        // MPI_Init_thread ... MPI_Finalize
//     sprig::dist::MpiCommunicator comm;               // a duplicate of MPI_COMM_WORLD
//
// MpiSession initialises MPI (MPI_THREAD_FUNNELED: OpenMP threads inside sprig's kernels
// never call MPI) unless it is initialised already, and finalises it only if it initialised
// it. MpiCommunicator works on its own duplicate of the communicator it is given, with
// MPI_ERRORS_RETURN, so an MPI failure becomes a sprig::Error naming the call and MPI's
// message instead of an abort; requests left unfinished are waited on by the destructor.
// Sum-allreduces use MPI_SUM on MPI_FLOAT / MPI_DOUBLE / MPI_INT64_T; Open MPI's algorithms
// leave the same bits on every rank (the topology hash of a data-parallel run checks the
// consequence, dist/data_parallel.hpp).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "communicator.hpp"

namespace sprig::dist {

namespace detail {
// Throws sprig::Error naming `what` and MPI's message unless rc == MPI_SUCCESS.
inline void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(
      sprig::detail::message("MpiCommunicator: ", what, " failed: ", std::string(text, static_cast<std::size_t>(len))));
}
// MPI counts are int: a span larger than INT_MAX elements is an ArgumentError.
inline int mpi_count(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw ArgumentError(
        sprig::detail::message("MpiCommunicator: ", what, " of ", n, " elements exceeds MPI's int count"));
  return static_cast<int>(n);
}
}  // namespace detail

class MpiSession {
public:
  MpiSession(int& argc, char**& argv) {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (initialised) return;
    int provided = 0;
    detail::mpi_check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    owner_ = true;
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  ~MpiSession() {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (owner_ && !finalised) MPI_Finalize();
  }

  // Whether an MPI launcher started this process as one of several ranks (mpirun -np N,
  // N > 1), from the environment the launcher sets (Open MPI's OMPI_COMM_WORLD_SIZE, MPICH's
  // and Slurm's PMI_SIZE): callable before MPI is initialised, to decide whether to initialise
  // it (an example's automatic --distributed).
  static bool launched_with_ranks() noexcept {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
      if (const char* v = std::getenv(name); v && std::atoi(v) > 1) return true;
    return false;
  }

private:
  bool owner_ = false;
};

class MpiCommunicator final : public Communicator {
public:
  // Precondition: MPI is initialised (MpiSession). Throws sprig::Error if MPI fails.
  explicit MpiCommunicator(MPI_Comm parent = MPI_COMM_WORLD) {
    detail::mpi_check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  ~MpiCommunicator() override {
    for (MPI_Request& r : requests_)
      if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Comm_free(&comm_);
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string name() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<std::size_t>(len));
    const auto comma = v.find(',');
    return "MPI (" + v.substr(0, comma) + ")";
  }

  void allreduce_sum(std::span<float> d) override { allreduce(d.data(), d.size(), MPI_FLOAT); }
  void allreduce_sum(std::span<double> d) override { allreduce(d.data(), d.size(), MPI_DOUBLE); }
  void allreduce_sum(std::span<std::int64_t> d) override { allreduce(d.data(), d.size(), MPI_INT64_T); }

  std::int64_t start_allreduce_sum(std::span<float> d) override { return start(d.data(), d.size(), MPI_FLOAT); }
  std::int64_t start_allreduce_sum(std::span<double> d) override { return start(d.data(), d.size(), MPI_DOUBLE); }
  bool test(std::int64_t id) override {
    MPI_Request& r = request("test", id);
    int done = 0;
    detail::mpi_check(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }
  void wait(std::int64_t id) override {
    detail::mpi_check(MPI_Wait(&request("wait", id), MPI_STATUS_IGNORE), "MPI_Wait");
    trim();
  }
  void wait_all() override {
    if (!requests_.empty())
      detail::mpi_check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
                        "MPI_Waitall");
    requests_.clear();
    first_id_ = next_id_;
  }

  void allgather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    if (all.size() != mine.size() * static_cast<std::size_t>(size_))
      throw ArgumentError(sprig::detail::message("MpiCommunicator::allgather: ", all.size(), " bytes for ", size_,
                                                 " ranks of ", mine.size()));
    const int n = detail::mpi_count(mine.size(), "allgather");
    detail::mpi_check(MPI_Allgather(mine.data(), n, MPI_BYTE, all.data(), n, MPI_BYTE, comm_), "MPI_Allgather");
  }
  void broadcast(std::span<std::byte> data, int root) override {
    detail::mpi_check(MPI_Bcast(data.data(), detail::mpi_count(data.size(), "broadcast"), MPI_BYTE, root, comm_),
                      "MPI_Bcast");
  }
  void barrier() override { detail::mpi_check(MPI_Barrier(comm_), "MPI_Barrier"); }

  MPI_Comm handle() const noexcept { return comm_; }

private:
  void allreduce(void* data, std::size_t n, MPI_Datatype type) {
    if (n == 0) return;
    detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, data, detail::mpi_count(n, "allreduce"), type, MPI_SUM, comm_),
                      "MPI_Allreduce");
  }
  std::int64_t start(void* data, std::size_t n, MPI_Datatype type) {
    MPI_Request r = MPI_REQUEST_NULL;
    if (n > 0)
      detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, data, detail::mpi_count(n, "allreduce"), type, MPI_SUM, comm_, &r),
                        "MPI_Iallreduce");
    requests_.push_back(r);
    return next_id_++;
  }
  // Ids are consecutive; requests_[k] is id first_id_ + k.
  MPI_Request& request(const char* what, std::int64_t id) {
    if (id < first_id_ || id >= next_id_)
      throw ArgumentError(sprig::detail::message("MpiCommunicator::", what, ": no request ", id, " pending"));
    return requests_[static_cast<std::size_t>(id - first_id_)];
  }
  // Drops finished requests from the front.
  void trim() {
    std::size_t k = 0;
    while (k < requests_.size() && requests_[k] == MPI_REQUEST_NULL) ++k;
    requests_.erase(requests_.begin(), requests_.begin() + static_cast<std::ptrdiff_t>(k));
    first_id_ += static_cast<std::int64_t>(k);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<MPI_Request> requests_;
  std::int64_t first_id_ = 0;
  std::int64_t next_id_ = 0;
};

}  // namespace sprig::dist
