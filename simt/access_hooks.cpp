// How the emulator sees every load and store of the emulated kernels: their files are compiled
// with GCC's ThreadSanitizer instrumentation (-fsanitize=thread, CMakeLists.txt's
// simt_watch_accesses), without ThreadSanitizer's runtime: the compiler puts a call before every
// load and store that may touch memory another thread sees, reads and writes told apart, after
// the optimizations (what stays in registers makes no call), and the calls land here. The
// instruction's address is the call's return address. (AddressSanitizer's instrumentation would
// do too, but it leaves out an access to an address it checked just before, a store after a
// load of x[i] say, and the checks need every store.) Outside a kernel thread the calls return
// at once (the emulated files hold the CUDA backend's host code too); inside one,
// simt/memory_watch.cpp checks and counts them. Nothing else in the program is compiled this way.
#include <cstddef>
#include <cstdint>

#include "simt/launch_counters.h"
#include "simt/memory_watch.h"

namespace {

inline void access(const void* addr, size_t bytes, simt::detail::AccessKind kind, const void* pc) {
  using namespace simt::detail;
  if (g_block && (g_checks || g_counters)) watch_access(addr, bytes, kind, pc);
}

}  // namespace

#define SIMT_ACCESS_HOOKS(size)                                                              \
  extern "C" void __tsan_read##size(void* addr) {                                           \
    access(addr, size, simt::detail::AccessKind::Read, __builtin_return_address(0));        \
  }                                                                                         \
  extern "C" void __tsan_write##size(void* addr) {                                          \
    access(addr, size, simt::detail::AccessKind::Write, __builtin_return_address(0));       \
  }                                                                                         \
  extern "C" void __tsan_unaligned_read##size(void* addr) {                                 \
    access(addr, size, simt::detail::AccessKind::Read, __builtin_return_address(0));        \
  }                                                                                         \
  extern "C" void __tsan_unaligned_write##size(void* addr) {                                \
    access(addr, size, simt::detail::AccessKind::Write, __builtin_return_address(0));       \
  }
SIMT_ACCESS_HOOKS(1)
SIMT_ACCESS_HOOKS(2)
SIMT_ACCESS_HOOKS(4)
SIMT_ACCESS_HOOKS(8)
SIMT_ACCESS_HOOKS(16)
#undef SIMT_ACCESS_HOOKS

// Accesses of other sizes (a struct copied whole).
extern "C" void __tsan_read_range(void* addr, unsigned long bytes) {
  access(addr, bytes, simt::detail::AccessKind::Read, __builtin_return_address(0));
}
extern "C" void __tsan_write_range(void* addr, unsigned long bytes) {
  access(addr, bytes, simt::detail::AccessKind::Write, __builtin_return_address(0));
}

// The rest of what the instrumentation calls, with nothing for the emulator to do: a file's
// start, the store of an object's virtual-table pointer (host code's), function entry and exit.
extern "C" void __tsan_init() {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit() {}
