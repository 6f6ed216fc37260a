// Backend choice and CPU thread control.
#include "engine/backend_select.h"

#include <cblas.h>
#include <omp.h>

#include "engine/config.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/device_query.h"

namespace tt {

std::unique_ptr<Backend> select_backend(const std::string& choice, std::ostream& note) {
  if (choice == "cpu") return make_cpu_backend();
  if (choice != "cuda" && choice != "auto")
    throw InputError("unknown backend '" + choice + "' (expected auto, cpu or cuda)");
  const CudaDeviceInfo gpu = query_cuda_device();
  // The CUDA backend's kernels arrive with the CUDA backend issue; until then a working GPU
  // cannot be used either.
  const std::string why = gpu.usable ? "the CUDA backend is not implemented yet (GPU " + gpu.name + " found)"
                                     : gpu.reason;
  if (choice == "cuda") throw InputError("--backend cuda: " + why);
  note << "backend auto: " << why << "; running on the CPU backend" << std::endl;
  return make_cpu_backend();
}

void set_cpu_threads(int threads) {
  if (threads <= 0) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

}  // namespace tt
