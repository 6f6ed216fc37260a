// The memory plan: every buffer a training run will allocate, in bytes, computed from the same
// ArenaPlans the trainer allocates from, before anything is allocated. `tinytrain plan` prints
// it; `train` checks it against the free memory first and, when it does not fit, says what
// would (docs/memory.md).
#pragma once
#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "engine/trainer.h"

namespace tt {

struct PlanItem {
  std::string group;  // weights, optimizer, loss scaler, batch, activations, workspace
  std::string name;
  size_t bytes;        // including the alignment padding up to the next buffer
  bool on_device = true;  // false: pinned host memory (CUDA staging)
};

struct MemoryPlan {
  std::vector<PlanItem> items;
  size_t device_bytes() const;  // what must fit in device memory (the peak: all of it lives for the whole run)
  size_t group_bytes(const std::string& group) const;
};

// What `train` with these options allocates on a backend of this kind ("cpu" or "cuda").
MemoryPlan plan_training(const TrainOptions& options, const std::string& backend);

// The largest batch (sequences per micro-batch of each of options.ranks ranks, grad_accum 1)
// whose plan fits in `available` bytes with recompute mode `recompute`; 0 when not even one
// sequence fits.
int largest_micro_batch(TrainOptions options, Recompute recompute, size_t available, const std::string& backend);

void print_plan(const MemoryPlan& plan, const TrainOptions& options, const std::string& backend, std::ostream& out);

// One line: what was asked, what is free, the three biggest buffers, and which of --recompute,
// --grad-accum or a smaller --batch would fit (each computed from the plan).
std::string out_of_memory_message(const TrainOptions& options, const std::string& backend, size_t available,
                                  const std::string& what_failed);

// Parses "123", "64K", "512MiB", "80GB" (binary units) into bytes; InputError if malformed.
size_t parse_bytes(const std::string& text);

// Free memory where the run would allocate: the free memory of GPU `device` for "cuda" (-1:
// the current device, query_cuda_device), MemAvailable from /proc/meminfo for "cpu".
size_t available_memory(const std::string& backend, int device = -1);

}  // namespace tt
