// Every rank's settings hashed, gathered and compared (rank_agreement.h).
#include "cli/rank_agreement.h"

#include <cstdint>

#include "base/checked_input.h"
#include "engine/config.h"

namespace tt {
namespace {

// FNV-1a over "flag=value", folded to 31 bits: a different value changes it but for a chance
// of 2^-31 per flag.
int32_t setting_hash(const std::string& flag, const std::string& value) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : flag + "=" + value) h = (h ^ ch) * 1099511628211ull;
  return static_cast<int32_t>((h ^ (h >> 32)) & 0x7fffffff);
}

// Every rank's `mine` (n values each), rank r's at [r n, (r+1) n).
std::vector<int32_t> gather(Communicator& comm, Backend& backend, const std::vector<int32_t>& mine) {
  const int64_t n = static_cast<int64_t>(mine.size());
  std::vector<int32_t> all(static_cast<size_t>(n) * comm.world_size());
  if (!comm.on_backend_stream()) {
    comm.all_gather(mine.data(), all.data(), n, DType::I32);
    return all;
  }
  const size_t bytes = all.size() * sizeof(int32_t);
  char* device = static_cast<char*>(backend.allocate(bytes));
  char* my_slot = device + static_cast<size_t>(comm.rank()) * n * sizeof(int32_t);
  backend.copy_to_device(my_slot, mine.data(), static_cast<size_t>(n) * sizeof(int32_t));
  comm.all_gather(my_slot, device, n, DType::I32);
  backend.copy_to_host(all.data(), device, bytes);
  backend.release(device);
  return all;
}

}  // namespace

void check_same_settings(Communicator& comm, Backend& backend, const Settings& settings) {
  if (comm.world_size() == 1) return;
  const std::vector<int32_t> counts = gather(comm, backend, {static_cast<int32_t>(settings.size())});
  for (int r = 1; r < comm.world_size(); ++r)
    if (counts[r] != counts[0])
      throw InputError("rank " + std::to_string(r) + " has " + std::to_string(counts[r]) + " settings and rank 0 " +
                       std::to_string(counts[0]) + ": every rank must run the same tinytrain build");
  std::vector<int32_t> mine;
  for (const auto& [flag, value] : settings) mine.push_back(setting_hash(flag, value));
  const std::vector<int32_t> all = gather(comm, backend, mine);
  const size_t n = settings.size();
  for (size_t i = 0; i < n; ++i)
    for (int r = 1; r < comm.world_size(); ++r)
      if (all[r * n + i] != all[i])
        throw InputError("the ranks were started with different settings: rank " + std::to_string(r) + "'s " +
                         settings[i].first + " differs from rank 0's (rank " + std::to_string(comm.rank()) +
                         " has '" + printable(settings[i].second) + "'); every rank must train with the same flags");
}

}  // namespace tt
