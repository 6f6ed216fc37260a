// The communicators' collectives against closed forms. Run under a launcher with W ranks
// (ctest: mpirun -np 2 and -np 3, oversubscribed on 2 cores), every rank runs every test;
// a failure on any rank fails the run. Rank r's values are small integers times powers of
// two, so every sum is exact in float whatever order the transport adds in, and the
// expected value is a formula, not another communicator's output.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace tt {
namespace {

bool launched_by_mpi() { return detect_launch().kind == Launch::Kind::Mpi; }

Communicator& comm() {
  static std::unique_ptr<Communicator> c = launched_by_mpi() ? make_mpi_communicator() : make_single_rank_communicator();
  return *c;
}

// Rank r's i-th value, and the sum over ranks 0..W-1 of it.
float value(int r, int64_t i) { return static_cast<float>((r + 1) * (i % 97) - 3 * r) * 0.5f; }
float sum_over_ranks(int W, int64_t i) {
  float s = 0;
  for (int r = 0; r < W; ++r) s += value(r, i);
  return s;
}

TEST(Communicator, KnowsItsRankAndWorldSize) {
  const int W = comm().world_size();
  EXPECT_GE(comm().rank(), 0);
  EXPECT_LT(comm().rank(), W);
  if (launched_by_mpi()) EXPECT_STREQ(comm().transport(), "mpi");
  // Every rank reports the same world size and a distinct rank: their sum is 0+1+...+W-1.
  std::vector<int32_t> v = {W, comm().rank()};
  comm().all_reduce_sum(v.data(), 2, DType::I32);
  EXPECT_EQ(v[0], W * W);
  EXPECT_EQ(v[1], W * (W - 1) / 2);
}

TEST(Communicator, AllReduceSumsElementwise) {
  const int W = comm().world_size(), r = comm().rank();
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{65537}}) {
    std::vector<float> buf(n);
    for (int64_t i = 0; i < n; ++i) buf[i] = value(r, i);
    comm().all_reduce_sum(buf.data(), n, DType::F32);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], sum_over_ranks(W, i)) << "n " << n << " i " << i;
  }
}

TEST(Communicator, ReduceScatterGivesEachRankTheSumOfItsChunk) {
  const int W = comm().world_size(), r = comm().rank();
  const int64_t n = 333;  // per rank
  std::vector<float> send(W * n), recv(n, -1.0f);
  for (int64_t i = 0; i < W * n; ++i) send[i] = value(r, i);
  comm().reduce_scatter_sum(send.data(), recv.data(), n, DType::F32);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(recv[i], sum_over_ranks(W, r * n + i)) << i;
}

TEST(Communicator, AllGatherPutsRankRsChunkAtR) {
  const int W = comm().world_size(), r = comm().rank();
  const int64_t n = 257;
  std::vector<float> send(n), recv(W * n, -1.0f);
  for (int64_t i = 0; i < n; ++i) send[i] = value(r, i);
  comm().all_gather(send.data(), recv.data(), n, DType::F32);
  for (int q = 0; q < W; ++q)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(recv[q * n + i], value(q, i)) << "rank " << q << " i " << i;
}

TEST(Communicator, ReduceScatterThenAllGatherIsAllReduce) {
  // ZeRO-1's two halves together must give what the plain all-reduce gives.
  const int W = comm().world_size(), r = comm().rank();
  const int64_t n = 64;
  std::vector<float> grads(W * n), shard(n), gathered(W * n), reduced(W * n);
  for (int64_t i = 0; i < W * n; ++i) grads[i] = reduced[i] = value(r, i);
  comm().reduce_scatter_sum(grads.data(), shard.data(), n, DType::F32);
  comm().all_gather(shard.data(), gathered.data(), n, DType::F32);
  comm().all_reduce_sum(reduced.data(), W * n, DType::F32);
  EXPECT_EQ(gathered, reduced);
}

TEST(Communicator, BroadcastCopiesTheRootsValues) {
  const int W = comm().world_size(), r = comm().rank();
  for (int root = 0; root < W; ++root) {
    std::vector<float> buf(100);
    for (int64_t i = 0; i < 100; ++i) buf[i] = value(r, i);
    comm().broadcast(buf.data(), 100, DType::F32, root);
    for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(buf[i], value(root, i)) << "root " << root;
  }
  comm().barrier();
}

// ZeRO-1's parameter step: each rank's shard already sits at its slot of the whole buffer.
TEST(Communicator, AllGatherInPlace) {
  const int W = comm().world_size(), r = comm().rank();
  const int64_t n = 37;
  std::vector<float> whole(static_cast<size_t>(W) * n, -1.0f);
  for (int64_t i = 0; i < n; ++i) whole[r * n + i] = value(r, i);
  comm().all_gather(whole.data() + r * n, whole.data(), n, DType::F32);
  for (int q = 0; q < W; ++q)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(whole[q * n + i], value(q, i)) << "shard " << q;
}

TEST(Communicator, HalfPrecisionSumsAreRefusedNotMisread) {
  if (!launched_by_mpi()) GTEST_SKIP() << "the one-rank communicator sums nothing";
  std::vector<uint16_t> buf(4);
  EXPECT_THROW(comm().all_reduce_sum(buf.data(), 4, DType::BF16), std::invalid_argument);
}

}  // namespace
}  // namespace tt
