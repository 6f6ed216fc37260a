// The `tinytrain train` loop around a Trainer: batches (random tokens or --data windows),
// evaluation, the log and its progress line, the metrics file, checkpoints and resume.
#pragma once
#include <ostream>

#include "engine/trainer.h"
#include "parallel/communicator.h"

namespace tt {

// Throws InputError for evaluation flags without --data, a non-causal model with --data,
// --init-from with --resume, or counts that are not positive.
void check_data_options(const TrainOptions& options);

// Trains options.run.steps steps. On random tokens it logs "step | loss | alloc" every
// --log-every steps; on --data a progress line "step s/total | loss | val | lr | tokens/s | ETA
// | alloc". Then "done: ... tokens/s | ms/step". With a communicator of several ranks, each
// trains its rows of every global batch and only rank 0 logs (the speed line adds the world
// size; tokens/s counts the global batch). With options.checkpoint: resumes from a checkpoint
// before the first step, and saves one (rank 0 writes) after the steps it names, one log line
// each (engine/io/checkpoint.h).
void run_training(Backend& backend, const TrainOptions& options, std::ostream& log, Communicator* comm = nullptr);

}  // namespace tt
