// main() of the MPI build of the dist tests: MPI up, one MpiCommunicator over every rank, then
// Catch2. Every rank runs every test; each prints its own report, and mpirun's exit status is
// the worst rank's.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <sprig/dist/mpi_communicator.hpp>

#include "test_communicator.hpp"

namespace {
sprig::dist::Communicator* world = nullptr;
}

sprig::dist::Communicator& sprig::testing::communicator() { return *world; }

int main(int argc, char** argv) {
  sprig::dist::MpiSession mpi(argc, argv);
  sprig::dist::MpiCommunicator comm;
  world = &comm;
  return Catch::Session().run(argc, argv);
}
