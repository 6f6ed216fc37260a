// cuDNN on the emulated device: there is none (cuDNN's kernels are NVIDIA's binaries, which no
// emulator runs), so `--attention cudnn` says so and the CUDA backend keeps its own attention
// kernels. Built with the emulated kernels/cuda/ files (simt/prelude.h), in tt::emu.
#include <stdexcept>

#include "kernels/cuda/cudnn_attention.h"

namespace tt {

namespace {
const char* const kNoCudnn = "the emulated CUDA device has no cuDNN";
}

std::string cudnn_attention_unsupported(const AttentionShape&, DType, float) { return kNoCudnn; }

std::unique_ptr<CudnnAttention> make_cudnn_attention(cudaStream_t) { throw std::runtime_error(kNoCudnn); }

}  // namespace tt
