// Timing all-reduces through a communicator (see allreduce_probe.h).
#include "engine/doctor/allreduce_probe.h"

#include <memory>
#include <vector>

#include "kernels/arena.h"

namespace tt {

namespace {

// Waits for what the backend's stream holds (NCCL's collectives are on it) under the
// communicator's watchdog: a peer that died ends this rank with one line, not a hang.
void wait_for(Communicator& comm, Backend& backend) {
  const HostWait wait(&comm, "doctor's all-reduce");
  backend.synchronize();
}

}  // namespace

AllReduceMeasure measure_all_reduce(Communicator& comm, Backend& backend, int64_t bytes, int warmup, int iters) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(float));
  const int W = comm.world_size();
  AllReduceMeasure m;
  m.bytes = n * static_cast<int64_t>(sizeof(float));
  ArenaPlan plan;
  plan.add("buffer", DType::F32, Shape{n});
  plan.add("seconds", DType::F32, Shape{1});
  const Arena arena(backend, plan);
  const Tensor buf = arena.get("buffer"), time = arena.get("seconds");

  std::vector<float> host(static_cast<size_t>(n), static_cast<float>(comm.rank() + 1));
  backend.copy_to_device(buf.data, host.data(), static_cast<size_t>(m.bytes));
  comm.all_reduce_sum(buf.data, n, DType::F32);
  wait_for(comm, backend);
  backend.copy_to_host(host.data(), buf.data, static_cast<size_t>(m.bytes));
  const float want = static_cast<float>(W) * static_cast<float>(W + 1) / 2.0f;
  for (float x : host) m.sums_right = m.sums_right && x == want;
  backend.fill_zero(buf);  // sums of zeros stay zeros: any number of calls stays finite

  for (int i = 0; i < warmup; ++i) comm.all_reduce_sum(buf.data, n, DType::F32);
  wait_for(comm, backend);
  comm.barrier();  // every rank starts the timed calls together
  // on the backend's own timeline (kernels/stream_clock.h): events on a GPU's stream, so the
  // time is the collectives', not their launches'
  const std::unique_ptr<StreamClock> clock = backend.make_stream_clock();
  clock->mark();
  for (int i = 0; i < iters; ++i) comm.all_reduce_sum(buf.data, n, DType::F32);
  clock->mark();
  wait_for(comm, backend);  // (so that reading the clock cannot wait outside the watchdog)
  float seconds = static_cast<float>(clock->read().back() * 1e-3 / iters);

  // the mean over the ranks, through the same communicator (its buffers are backend memory)
  backend.copy_to_device(time.data, &seconds, sizeof(float));
  comm.all_reduce_sum(time.data, 1, DType::F32);
  wait_for(comm, backend);
  backend.copy_to_host(&seconds, time.data, sizeof(float));
  m.seconds = static_cast<double>(seconds) / W;
  return m;
}

}  // namespace tt
