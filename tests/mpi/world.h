// The communicator of an MPI test binary: MPI_COMM_WORLD under mpirun (the one rank without
// it), made once and shared by every test of the binary, as the ranks must call every
// collective in the same order.
#pragma once
#include <memory>

#include "parallel/communicator.h"

namespace tt::test {

inline Communicator& world() {
  static std::unique_ptr<Communicator> c = make_communicator(detect_launch(), "cpu", nullptr, 300);
  return *c;
}

}  // namespace tt::test
