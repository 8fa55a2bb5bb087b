// The communicator a dist test runs on: SingleProcessCommunicator, or with SPRIG_TEST_MPI the
// MpiCommunicator that tests/dist/mpi_main.cpp builds (the test then runs under mpirun).
#pragma once

#include <sprig/dist/communicator.hpp>

namespace sprig::testing {
#if defined(SPRIG_TEST_MPI)
dist::Communicator& communicator();
#else
inline dist::Communicator& communicator() {
  static dist::SingleProcessCommunicator one;
  return one;
}
#endif
}  // namespace sprig::testing
