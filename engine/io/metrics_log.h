// `train --metrics FILE.jsonl`: one JSON object per line, per logged step, for plots and
// comparisons (tools/plot_metrics.py). Fields: step, loss, val_loss, lr, grad_norm,
// tokens_per_s, ms_per_step, loss_scale, alloc_mb, tflops, mfu, graph_nodes (the captured CUDA
// graph's nodes by kind: {total, gemm, attention, elementwise, reduction, optimizer, memset_copy,
// other}); a value not measured at that step is null.
//
// Each line is flushed as it is written, so a killed run leaves every finished line (and at
// most one torn last line). A resumed run keeps the lines of the steps before the one it resumes
// at, drops the rest (steps the killed run took after its checkpoint, which the resumed run
// takes again) and writes on: the file reads as one uninterrupted run.
#pragma once
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace tt {

class MetricsLog {
 public:
  // An empty path writes nothing. resume_step > 0: keep the existing file's lines whose step is
  // below it (a torn or foreign line ends what is kept). Throws InputError when the file cannot
  // be written.
  MetricsLog(const std::string& path, int resume_step);
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace tt
