// The NCCL communicator: device buffers, collectives enqueued on the CUDA backend's stream
// (so they order with its kernels, never wait on the host, and are captured in its CUDA
// graph). Overlap: all_reduce_sum_async forks a second stream from the backend's (an event),
// enqueues the all-reduce there, and join_async joins it back: the gradient buckets of the
// backward run beside the rest of the backward, inside one graph.
// Faults: the communicator is created non-blocking; a collective's host side, and
// synchronize-time waits, poll ncclCommGetAsyncError, and one that has not finished within
// timeout_s aborts the communicator (ncclCommAbort) and ends the process with one line.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "parallel/communicator.h"

namespace tt {

// share_from_rank0(data, bytes): rank 0's bytes on every rank (an MPI broadcast under
// mpirun, tcp_share_from_rank0 under torchrun-style variables): carries NCCL's unique id.
// backend_stream: the CUDA backend's cudaStream_t (Backend::native_stream()), on the device
// the backend already selected. Throws std::runtime_error with NCCL's message on failure.
std::unique_ptr<Communicator> make_nccl_communicator(int rank, int world_size, void* backend_stream,
                                                     double timeout_s,
                                                     const std::function<void(void*, size_t)>& share_from_rank0);

}  // namespace tt
