// The startup check that every rank trains with the same settings. Ranks launched one by one
// (torchrun-style) or with mpirun's per-rank command lines could differ in a flag, and a data
// parallel run whose ranks disagree on the learning rate or the model silently trains
// nonsense (or deadlocks on different buffer sizes). Each rank hashes every setting, the
// hashes are gathered, and every rank refuses, in one line naming the first differing flag.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "parallel/communicator.h"

namespace tt {

using Settings = std::vector<std::pair<std::string, std::string>>;  // (flag, value as given)

// Throws InputError naming the first flag whose value differs between this rank and another
// (and this rank's value), or when the ranks have different numbers of settings. Every rank
// reaches the same verdict. `backend` holds the gathered hashes where the transport needs
// backend memory (NCCL).
void check_same_settings(Communicator& comm, Backend& backend, const Settings& settings);

}  // namespace tt
