// The tensor-core instructions on the emulator (simt/tensor_core.h): fragments moved lane by
// lane as the PTX ISA lays them out, the products computed as the header's accumulation model
// says, and the hardware's rules checked.
#include "simt/tensor_core.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/common/half.h"
#include "simt/device.h"
#include "simt/device_memory.h"
#include "simt/launch_counters.h"

namespace simt {

namespace {

constexpr unsigned kWarp = 32;

std::string lane_text(unsigned lane) { return "lane " + std::to_string(lane); }

// The two 16-bit halves of a register: the lower half is the element with the lower index.
uint16_t low_half(uint32_t r) { return static_cast<uint16_t>(r & 0xffffu); }
uint16_t high_half(uint32_t r) { return static_cast<uint16_t>(r >> 16); }

float widen(MmaInput input, uint16_t bits) {
  if (input == MmaInput::BF16) return tt::to_float(tt::bf16{bits});
  return tt::to_float(tt::f16{bits});
}

// A tf32 operand: the register's top 19 bits (sign, 8 exponent, 10 mantissa); the mantissa's low
// 13 bits are not read by the tensor core.
float tf32(uint32_t r) { return tt::bits_float(r & 0xffffe000u); }

// ---- mma.sync ----

struct MmaLane {
  MmaInput input;
  const uint32_t* a;
  const uint32_t* b;
  const float* c;
  float* d;
};

std::string evaluate_mma(void* const lanes[kWarp]) {
  const MmaInput input = static_cast<const MmaLane*>(lanes[0])->input;
  const int K = input == MmaInput::TF32 ? 8 : 16;
  float A[16][16], B[16][8], C[16][8];
  for (unsigned lane = 0; lane < kWarp; ++lane) {
    const MmaLane& l = *static_cast<const MmaLane*>(lanes[lane]);
    if (l.input != input) return lane_text(lane) + " runs another type of mma than lane 0";
    const unsigned group = lane >> 2, in_group = lane % 4;
    if (input == MmaInput::TF32) {
      // "Matrix Fragments for mma.m16n8k8", .tf32: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4);
      // b0 (k = t, n = g), b1 (k = t+4, n = g).
      A[group][in_group] = tf32(l.a[0]);
      A[group + 8][in_group] = tf32(l.a[1]);
      A[group][in_group + 4] = tf32(l.a[2]);
      A[group + 8][in_group + 4] = tf32(l.a[3]);
      B[in_group][group] = tf32(l.b[0]);
      B[in_group + 4][group] = tf32(l.b[1]);
    } else {
      // "Matrix Fragments for mma.m16n8k16 with floating point type": register r of A holds
      // a(2r), a(2r+1); rows g (r = 0, 2) or g+8 (r = 1, 3), columns 2t, 2t+1, +8 for r = 2, 3.
      // B's register r holds k = 2t, 2t+1 (+8 for r = 1) of column n = g.
      for (int r = 0; r < 4; ++r) {
        const unsigned row = group + (r % 2) * 8, col = in_group * 2 + (r / 2) * 8;
        A[row][col] = widen(input, low_half(l.a[r]));
        A[row][col + 1] = widen(input, high_half(l.a[r]));
      }
      for (int r = 0; r < 2; ++r) {
        const unsigned k = in_group * 2 + r * 8;
        B[k][group] = widen(input, low_half(l.b[r]));
        B[k + 1][group] = widen(input, high_half(l.b[r]));
      }
    }
    // C and D: c0, c1 at row g, c2, c3 at row g+8; columns 2t, 2t+1.
    for (int i = 0; i < 4; ++i) C[group + (i / 2) * 8][in_group * 2 + (i % 2)] = l.c[i];
  }
  // Every product exact in fp32, added to C in k order, each sum rounded (the header's model).
  float D[16][8];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float acc = C[i][j];
      for (int k = 0; k < K; ++k) acc += A[i][k] * B[k][j];
      D[i][j] = acc;
    }
  for (unsigned lane = 0; lane < kWarp; ++lane) {
    const MmaLane& l = *static_cast<const MmaLane*>(lanes[lane]);
    const unsigned group = lane >> 2, in_group = lane % 4;
    for (int i = 0; i < 4; ++i) l.d[i] = D[group + (i / 2) * 8][in_group * 2 + (i % 2)];
  }
  if (detail::g_counters) {
    if (input == MmaInput::BF16) ++detail::g_counters->mma_bf16;
    if (input == MmaInput::FP16) ++detail::g_counters->mma_fp16;
    if (input == MmaInput::TF32) ++detail::g_counters->mma_tf32;
  }
  return "";
}

// ---- ldmatrix ----

struct LdmatrixLane {
  int count;
  bool trans;
  uint32_t* regs;
  const void* row;
  const void* pc;
};

std::string evaluate_ldmatrix(void* const lanes[kWarp]) {
  const LdmatrixLane& first = *static_cast<const LdmatrixLane*>(lanes[0]);
  const int count = first.count;
  const bool trans = first.trans;
  uint16_t m[4][8][8];  // matrix, row, column
  const void* rows[32];
  const unsigned running = detail::g_thread;
  const unsigned base = running - running % kWarp;
  for (unsigned lane = 0; lane < kWarp; ++lane) {
    const LdmatrixLane& l = *static_cast<const LdmatrixLane*>(lanes[lane]);
    if (l.count != count || l.trans != trans) return lane_text(lane) + " runs another form of ldmatrix than lane 0";
    if (lane >= static_cast<unsigned>(8 * count)) continue;  // .x1 reads lanes 0-7's addresses, .x2 lanes 0-15's
    const auto address = reinterpret_cast<uintptr_t>(l.row);
    if (!detail::shared_array_of(l.row, 16))
      return lane_text(lane) + "'s row address " + std::to_string(address) +
             " is not 16 bytes inside the block's shared memory (ldmatrix reads the .shared state space only)";
    if (address % 16 != 0)
      return lane_text(lane) + "'s row address is " + std::to_string(address % 16) +
             " bytes past a 16-byte boundary (each row of 8 elements must be 16-byte aligned)";
    // The read is the lane's own, for racecheck: the lane gave the address.
    detail::g_thread = base + lane;
    LaunchCounters* counters = detail::g_counters;
    detail::g_counters = nullptr;  // counted below, as one instruction
    detail::watch_access(l.row, 16, detail::AccessKind::Read, l.pc);
    detail::g_counters = counters;
    std::memcpy(m[lane / 8][lane % 8], l.row, 16);
    rows[lane] = l.row;
  }
  detail::g_thread = running;
  // Each lane receives, of each matrix, row lane/4 and columns 2(lane%4), 2(lane%4)+1; with
  // .trans, of the transposed matrix: column lane/4, rows 2(lane%4) and 2(lane%4)+1.
  for (unsigned lane = 0; lane < kWarp; ++lane) {
    const LdmatrixLane& l = *static_cast<const LdmatrixLane*>(lanes[lane]);
    const unsigned r = lane / 4, c = 2 * (lane % 4);
    for (int j = 0; j < count; ++j) {
      const uint16_t lo = trans ? m[j][c][r] : m[j][r][c];
      const uint16_t hi = trans ? m[j][c + 1][r] : m[j][r][c + 1];
      l.regs[j] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    }
  }
  if (detail::g_counters) {
    ++detail::g_counters->ldmatrix;
    detail::count_shared_rows(rows, 8 * count, 16);
  }
  return "";
}

// ---- cp.async: each thread's copies in flight ----

struct Copy {
  char* dst;
  int bytes;
  std::vector<char> data;  // the source's first bytes, read at issue (the rest is zero)
  const void* pc;
};
struct CopyQueue {
  std::vector<std::vector<Copy>> groups;  // committed, oldest first
  std::vector<Copy> open;                 // issued since the last commit
};
std::unordered_map<uint64_t, CopyQueue> g_queues;  // by (block run, thread)

uint64_t queue_key(const detail::BlockWatch& block, unsigned thread) { return (uint64_t{block.serial} << 32) | thread; }

void land(const Copy& copy) {
  if (!copy.data.empty()) std::memcpy(copy.dst, copy.data.data(), copy.data.size());
  std::memset(copy.dst + copy.data.size(), 0, static_cast<size_t>(copy.bytes) - copy.data.size());
  // The data arrives now: a write of this thread's for racecheck (counted already at issue).
  LaunchCounters* counters = detail::g_counters;
  detail::g_counters = nullptr;
  detail::watch_access(copy.dst, static_cast<size_t>(copy.bytes), detail::AccessKind::Write, copy.pc);
  detail::g_counters = counters;
}

}  // namespace

void mma_sync(MmaInput input, float* d, const uint32_t* a, const uint32_t* b, const float* c, const char* file,
              int line) {
  MmaLane lane{input, a, b, c, d};
  detail::warp_collective(&evaluate_mma, &lane, "mma.sync", file, line);
}

uint32_t cvt_pack(MmaInput type, float lo, float hi) {
  const bool bf = type == MmaInput::BF16;
  const uint16_t low = bf ? tt::float_to_bf16(lo).bits : tt::float_to_f16(lo).bits;
  const uint16_t high = bf ? tt::float_to_bf16(hi).bits : tt::float_to_f16(hi).bits;
  return static_cast<uint32_t>(low) | (static_cast<uint32_t>(high) << 16);
}

void ldmatrix(int count, bool trans, uint32_t* regs, const void* row, const char* file, int line) {
  LdmatrixLane lane{count, trans, regs, row, __builtin_return_address(0)};
  detail::warp_collective(&evaluate_ldmatrix, &lane, "ldmatrix", file, line);
}

void cp_async(void* dst, const void* src, int bytes, int src_bytes, bool cache_global, const char* file, int line) {
  auto fault = [&](const std::string& what) { detail::device_fault(("cp.async " + what).c_str(), file, line); };
  if (bytes != 4 && bytes != 8 && bytes != 16) fault("copies 4, 8 or 16 bytes, not " + std::to_string(bytes));
  if (cache_global && bytes != 16) fault(".cg copies 16 bytes only, not " + std::to_string(bytes));
  if (src_bytes < 0 || src_bytes > bytes)
    fault("src-size " + std::to_string(src_bytes) + " is not 0.." + std::to_string(bytes));
  if (!detail::shared_array_of(dst, static_cast<size_t>(bytes)))
    fault("destination is not " + std::to_string(bytes) + " bytes of the block's shared memory");
  if (src_bytes > 0 && !detail::find_allocation(src, static_cast<size_t>(src_bytes)))
    fault("source is not " + std::to_string(src_bytes) + " bytes of device memory");
  if (reinterpret_cast<uintptr_t>(dst) % bytes != 0 || reinterpret_cast<uintptr_t>(src) % bytes != 0)
    fault("addresses must both be aligned to the copy's " + std::to_string(bytes) + " bytes");
  const void* pc = __builtin_return_address(0);
  Copy copy{static_cast<char*>(dst), bytes, std::vector<char>(static_cast<size_t>(src_bytes)), pc};
  if (src_bytes > 0) {
    detail::watch_access(src, static_cast<size_t>(src_bytes), detail::AccessKind::Read, pc);  // read now
    std::memcpy(copy.data.data(), src, static_cast<size_t>(src_bytes));
  }
  // In flight: the destination is undefined until the wait, and it is this thread's write.
  detail::watch_access(dst, static_cast<size_t>(bytes), detail::AccessKind::Write, pc);
  std::memset(dst, 0xff, static_cast<size_t>(bytes));
  if (detail::g_counters) detail::g_counters->cp_async_bytes += static_cast<uint64_t>(bytes);
  g_queues[queue_key(*detail::g_block, detail::g_thread)].open.push_back(std::move(copy));
}

void cp_async_commit_group() {
  CopyQueue& q = g_queues[queue_key(*detail::g_block, detail::g_thread)];
  q.groups.push_back(std::move(q.open));
  q.open.clear();
}

void cp_async_wait_group(int n) {
  auto found = g_queues.find(queue_key(*detail::g_block, detail::g_thread));
  if (found == g_queues.end()) return;
  CopyQueue& q = found->second;
  while (q.groups.size() > static_cast<size_t>(std::max(n, 0))) {
    for (const Copy& copy : q.groups.front()) land(copy);
    q.groups.erase(q.groups.begin());
  }
}

namespace detail {

void cp_async_thread_exit(BlockWatch& block, unsigned thread) {
  if (g_queues.empty()) return;  // every exit asks; most kernels have no copies in flight
  auto found = g_queues.find(queue_key(block, thread));
  if (found == g_queues.end()) return;
  for (const auto& group : found->second.groups)
    for (const Copy& copy : group) land(copy);
  for (const Copy& copy : found->second.open) land(copy);
  g_queues.erase(found);
}

void cp_async_block_end(BlockWatch& block) {
  if (g_queues.empty()) return;
  for (auto it = g_queues.begin(); it != g_queues.end();) {
    if (it->first >> 32 == block.serial)
      it = g_queues.erase(it);
    else
      ++it;
  }
}

}  // namespace detail

}  // namespace simt
