// The torchrun-style bootstrap: rank 0 hands a few bytes (NCCL's unique id) to every other
// rank over TCP, the way torch.distributed's TCPStore does, so that NCCL ranks can start
// without mpirun. Rank 0 listens on MASTER_PORT; every other rank connects to
// MASTER_ADDR:MASTER_PORT (retrying until rank 0 is up or the timeout passes) and says its
// rank and world size; rank 0 checks them and answers each with the bytes, or with the error,
// so that every rank fails with the same one line.
#pragma once
#include <cstddef>

#include "parallel/rank_launch.h"

namespace tt {

// launch: a Torchrun launch (rank, world_size, master_addr, master_port). data (bytes): rank
// 0's are sent; every other rank's are overwritten with them. Returns once every rank has
// them (rank 0: once all world_size - 1 ranks were answered). Throws std::runtime_error, one
// line: the port is in use (rank 0), MASTER_ADDR does not resolve, nobody answered within
// timeout_s, a rank says a different world size or a rank that already joined, a peer hung
// up mid-message.
void tcp_share_from_rank0(const Launch& launch, void* data, size_t bytes, double timeout_s);

}  // namespace tt
