// What an emulated library (cuBLASLt: simt/cublaslt.cpp; CUB: simt/cub.cpp) needs of the
// emulated runtime (simt/runtime.cpp).
#pragma once
#include <functional>
#include <string>

#include "simt/cuda_api.h"

namespace simt {

// The library's work on `stream`, run when the stream gets to it; when captured, a kernel node
// of the library's kernel `library_kernel` (any address unique to it), named `name`.
cudaError_t enqueue_work(cudaStream_t stream, const void* library_kernel, const char* name,
                         std::function<cudaError_t()> work);
// A fault of that work, reported at the host's next wait as a kernel's is.
void library_fault(const std::string& fault);

}  // namespace simt
