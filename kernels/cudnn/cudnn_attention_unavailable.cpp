// A CUDA build without cuDNN (CMake found none): `--attention cudnn` says so and the CUDA
// backend keeps its own attention kernels. The real path: kernels/cudnn/.
#include <stdexcept>

#include "kernels/cuda/cudnn_attention.h"

namespace tt {

namespace {
const char* const kNoCudnn = "this build has no cuDNN (configure with -DCUDNN_ROOT=<cuDNN install or wheel folder>)";
}

std::string cudnn_attention_unsupported(const AttentionShape&, DType, float) { return kNoCudnn; }

std::unique_ptr<CudnnAttention> make_cudnn_attention(cudaStream_t) { throw std::runtime_error(kNoCudnn); }

}  // namespace tt
