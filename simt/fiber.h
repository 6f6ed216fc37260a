// Fibers: a CUDA thread's own stack and registers, so the scheduler (simt/scheduler.cpp) can
// stop a thread at a barrier or warp operation and later continue it, all on one OS thread.
// A Context is where a switch saves the running code's registers; switch_context saves the
// current code in one context and continues another, fiber to fiber or to and from the
// scheduler's own stack. On x86-64 a switch is a few instructions of our own (the callee-saved
// registers, the SSE and x87 control words, the stack pointer); elsewhere it is ucontext's
// swapcontext. Under AddressSanitizer every switch tells ASan which stack becomes current
// (its fiber annotations), so it keeps checking the fibers' stacks.
#pragma once
#include <cstddef>

#if defined(__x86_64__) && !defined(SIMT_FIBER_UCONTEXT)  // -DSIMT_FIBER_UCONTEXT: ucontext everywhere
#define SIMT_FIBER_ASM 1
#else
#include <ucontext.h>
#endif

namespace simt {

struct Context {
#ifdef SIMT_FIBER_ASM
  void* sp = nullptr;  // the saved stack pointer; the registers are on that stack
#else
  ucontext_t uc;
#endif
  // The stack's extent, for AddressSanitizer (the OS thread's own is learnt on the first switch).
  const void* stack_bottom = nullptr;
  size_t stack_size = 0;
};

// Saves the running code in `from` and continues the code saved in `to`.
void switch_context(Context& from, Context& to);
// The first thing a fiber's entry function does (it completes the switch that started it).
void fiber_started();

class Fiber {
 public:
  using Entry = void (*)(void* arg);
  Fiber(Entry entry, void* arg);  // a stack of its own; starts in entry(arg) when first switched to
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  Context& context() { return context_; }
  // Starts the fiber afresh at entry(arg) the next time it is switched to, discarding what it
  // was doing (a kernel thread abandoned after a fault). entry never returns.
  void reset();

 private:
  Entry entry_;
  void* arg_;
  char* stack_ = nullptr;  // mapped memory: a guard page, then the stack
  size_t stack_bytes_ = 0;
  Context context_;
};

}  // namespace simt
