// The flags several commands share (cli/command.h).
#include "cli/command.h"

#include <map>
#include <string>

#include "base/checked_input.h"

namespace tt {

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) {
        try {
          parse_integer(text, lo, hi, "value");
          return std::string();
        } catch (const InputError& e) {
          return std::string(e.what());
        }
      },
      "INT");
}

CLI::Option* add_int_option(CLI::App& cmd, const std::string& name, int& value, const std::string& help, int64_t lo,
                            int64_t hi) {
  return cmd.add_option(name, value, help)->check(integer_in(lo, hi))->capture_default_str();
}

CLI::Option* add_seed_option(CLI::App& cmd, std::string& text, int64_t default_seed, const std::string& help) {
  text = std::to_string(default_seed);
  return cmd.add_option("--seed", text, help)->capture_default_str();
}

int64_t parse_seed(const std::string& text, const std::string& what) { return parse_integer(text, 0, INT64_MAX, what); }

CLI::Option* add_precision_option(CLI::App& cmd, std::string& precision) {
  return cmd.add_option("--precision", precision, "fp32 | bf16 | fp16: storage of activations and working weights")
      ->capture_default_str();
}

CLI::Option* add_backend_option(CLI::App& cmd, BackendChoice& choice) {
  return cmd
      .add_option_function<std::string>(
          "--backend", [&choice](const std::string& name) { choice = parse_backend_choice(name); },
          "auto | cpu | cuda | cuda-emu (the CUDA kernels on the CPU: slow)")
      ->default_str(backend_choice_name(choice));
}

CLI::Option* add_threads_option(CLI::App& cmd, int& threads) {
  return add_int_option(cmd, "--threads", threads, "CPU threads for the CPU backend (0: all cores)", 0, 65536);
}

CLI::Option* add_debug_sync_flag(CLI::App& cmd, bool& debug_sync) {
  return cmd.add_flag("--debug-sync", debug_sync,
                      "CUDA: wait after every op and name the op whose kernel faults (slow; no CUDA graphs)");
}

CLI::Option* add_gemm_option(CLI::App& cmd, GemmKernel& gemm) {
  static const std::map<std::string, GemmKernel> kGemmKernels = {{"cublaslt", GemmKernel::CublasLt},
                                                                 {"naive", GemmKernel::Naive},
                                                                 {"tiled", GemmKernel::Tiled},
                                                                 {"regblock", GemmKernel::RegBlock},
                                                                 {"mma", GemmKernel::Mma}};
  return cmd
      .add_option_function<std::string>(
          "--gemm", [&gemm](const std::string& name) { gemm = kGemmKernels.at(name); },
          "CUDA GEMMs: cublaslt | naive | tiled | regblock | mma (tinytrain's GEMM ladder, slower; mma: tensor "
          "cores, fp32 only with --tf32, else as regblock)")
      ->default_str("cublaslt")
      ->check(CLI::IsMember({"cublaslt", "naive", "tiled", "regblock", "mma"}));
}

CLI::Option* add_attention_option(CLI::App& cmd, AttentionKernel& attention) {
  return cmd
      .add_option_function<std::string>(
          "--attention",
          [&attention](const std::string& name) {
            attention = name == "cudnn"   ? AttentionKernel::Cudnn
                        : name == "naive" ? AttentionKernel::Naive
                        : name == "simt"  ? AttentionKernel::Simt
                                          : AttentionKernel::Flash;
          },
          "CUDA attention: flash (tinytrain's, no T x T matrix: tensor cores for bf16/fp16 at head sizes 64 and "
          "128, else as simt) | simt (tinytrain's flash on the CUDA cores) | naive (the T x T weights in memory) | "
          "cudnn (cuDNN fused, where it supports the case)")
      ->default_str("flash")
      ->check(CLI::IsMember({"flash", "simt", "naive", "cudnn"}));
}

void GpuFlags::add_to(CLI::App& cmd) {
  cmd.add_flag("--tf32", gpu.tf32, "CUDA: allow TF32 tensor-core GEMMs (off: exact fp32)");
  add_gemm_option(cmd, gpu.gemm);
  add_attention_option(cmd, gpu.attention);
  add_debug_sync_flag(cmd, gpu.debug_sync);
}

GpuOptions GpuFlags::options() const { return gpu; }

void GpuFlags::note_attention(const Backend& backend, std::ostream& out) const {
  if (gpu.attention == AttentionKernel::Cudnn && backend.name() != "cuda")
    out << "attention: the " << backend.name() << " backend has no cuDNN; tinytrain's attention kernel runs" << std::endl;
}

}  // namespace tt
