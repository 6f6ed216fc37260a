// Fibers (simt/fiber.h): stacks and the context switch.
#include "simt/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

// Under AddressSanitizer: GCC says so with __SANITIZE_ADDRESS__, clang with
// __has_feature(address_sanitizer) only.
#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif

#ifdef SIMT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace simt {

namespace {

#ifdef SIMT_ASAN
// The context being left by the switch in progress: its stack's extent is filled in when the
// switch lands (the OS thread's stack is known only then).
Context* g_leaving = nullptr;
#endif

void before_switch(Context& from, Context& to) {
#ifdef SIMT_ASAN
  g_leaving = &from;
  __sanitizer_start_switch_fiber(nullptr, to.stack_bottom, to.stack_size);
#else
  (void)from;
  (void)to;
#endif
}

// A fiber restarted after a fault was abandoned mid-frame: its stack's red zones are still
// marked, and would be reported when new frames land on them.
void forget_stack(char* bottom, size_t bytes) {
#ifdef SIMT_ASAN
  ASAN_UNPOISON_MEMORY_REGION(bottom, bytes);
#else
  (void)bottom;
  (void)bytes;
#endif
}

void after_switch() {
#ifdef SIMT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_leaving->stack_bottom, &g_leaving->stack_size);
#endif
}

// Kernel threads keep a few arrays and a short call chain; AddressSanitizer's red zones
// multiply stack use. Pages are only committed when touched.
#ifdef SIMT_ASAN
constexpr size_t kStackBytes = size_t{1} << 20;
#else
constexpr size_t kStackBytes = size_t{256} << 10;
#endif

char* map_stack(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "simt: cannot map a %zu-byte fiber stack\n", bytes);
    std::abort();
  }
  mprotect(p, page, PROT_NONE);  // a guard page below the stack: an overflow faults at once
  return static_cast<char*>(p);
}

}  // namespace

#ifdef SIMT_FIBER_ASM

// simt_fiber_switch(save, load): pushes the callee-saved registers and the SSE/x87 control
// words on the current stack, stores the stack pointer in *save, switches to `load` and pops
// the same things there. simt_fiber_start is where a new fiber's first switch "returns" to:
// it calls entry(arg), kept in r13 and r12 by Fiber::reset.
extern "C" void simt_fiber_switch(void** save, void* load);
extern "C" void simt_fiber_start();
asm(R"(
  .text
  .globl simt_fiber_switch
  .type simt_fiber_switch, @function
simt_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size simt_fiber_switch, .-simt_fiber_switch

  .globl simt_fiber_start
  .type simt_fiber_start, @function
simt_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size simt_fiber_start, .-simt_fiber_start
)");

void Fiber::reset() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  context_.stack_bottom = stack_ + page;
  context_.stack_size = stack_bytes_;
  forget_stack(stack_ + page, stack_bytes_);
  char* top = stack_ + page + stack_bytes_;  // page aligned, so 16-byte aligned
  auto* slot = reinterpret_cast<uint64_t*>(top);
  // The frame simt_fiber_switch pops, from the saved stack pointer up: control words, r15,
  // r14, r13 (entry), r12 (arg), rbx, rbp, return address (simt_fiber_start), then padding
  // so that simt_fiber_start runs with the stack 16-byte aligned at its call.
  slot[-2] = 0;
  slot[-3] = reinterpret_cast<uint64_t>(&simt_fiber_start);
  slot[-4] = 0;                                      // rbp
  slot[-5] = 0;                                      // rbx
  slot[-6] = reinterpret_cast<uint64_t>(arg_);       // r12
  slot[-7] = reinterpret_cast<uint64_t>(entry_);     // r13
  slot[-8] = 0;                                      // r14
  slot[-9] = 0;                                      // r15
  uint32_t control[2];
  asm volatile("stmxcsr %0" : "=m"(control[0]));
  asm volatile("fnstcw %0" : "=m"(control[1]));
  slot[-10] = (static_cast<uint64_t>(control[1] & 0xffffu) << 32) | control[0];
  context_.sp = &slot[-10];
}

void switch_context(Context& from, Context& to) {
  before_switch(from, to);
  simt_fiber_switch(&from.sp, to.sp);
  after_switch();
}

#else  // ucontext

namespace {
// makecontext passes int arguments: the pointers travel in two halves.
void ucontext_entry(unsigned int entry_lo, unsigned int entry_hi, unsigned int arg_lo, unsigned int arg_hi) {
  const auto entry = reinterpret_cast<Fiber::Entry>((static_cast<uintptr_t>(entry_hi) << 32) | entry_lo);
  void* arg = reinterpret_cast<void*>((static_cast<uintptr_t>(arg_hi) << 32) | arg_lo);
  entry(arg);
  std::abort();  // a fiber's entry never returns
}
}  // namespace

void Fiber::reset() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  context_.stack_bottom = stack_ + page;
  context_.stack_size = stack_bytes_;
  forget_stack(stack_ + page, stack_bytes_);
  getcontext(&context_.uc);
  context_.uc.uc_stack.ss_sp = stack_ + page;
  context_.uc.uc_stack.ss_size = stack_bytes_;
  context_.uc.uc_link = nullptr;
  const auto e = reinterpret_cast<uintptr_t>(entry_);
  const auto a = reinterpret_cast<uintptr_t>(arg_);
  makecontext(&context_.uc, reinterpret_cast<void (*)()>(&ucontext_entry), 4, static_cast<unsigned int>(e),
              static_cast<unsigned int>(e >> 32), static_cast<unsigned int>(a), static_cast<unsigned int>(a >> 32));
}

void switch_context(Context& from, Context& to) {
  before_switch(from, to);
  swapcontext(&from.uc, &to.uc);
  after_switch();
}

#endif

void fiber_started() { after_switch(); }

Fiber::Fiber(Entry entry, void* arg) : entry_(entry), arg_(arg) {
  stack_bytes_ = kStackBytes;
  stack_ = map_stack(stack_bytes_);
  reset();
}

Fiber::~Fiber() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  munmap(stack_, stack_bytes_ + page);
}

}  // namespace simt
