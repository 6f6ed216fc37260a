// Source lines of instructions, for the checks' reports (simt/memory_watch.h): an access is
// known by the address of the instruction after its hook's call, which binutils' addr2line turns
// into "layernorm.cu:88" through the line tables the emulated kernels are compiled with (-g1).
// Sites are numbered as they are first seen, so a shadow cell stores two bytes, not eight.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace simt::detail {

// The number of the site at `pc` (a return address inside an instrumented function). Every
// watched access asks, so a direct-mapped cache answers first; the table behind it, on a miss.
struct SiteCacheEntry {
  const void* pc;
  uint16_t site;
};
constexpr size_t kSiteCacheSize = 1024;
extern SiteCacheEntry g_site_cache[kSiteCacheSize];
uint16_t site_of_uncached(const void* pc);
inline uint16_t site_of(const void* pc) {
  const SiteCacheEntry& e = g_site_cache[(reinterpret_cast<uintptr_t>(pc) >> 1) % kSiteCacheSize];
  return e.pc == pc && pc ? e.site : site_of_uncached(pc);
}
// "file:line" of a site (the innermost inlined function's line), or "function+0xOFFSET" when
// there is no line table, or "an unknown line".
std::string site_line(uint16_t site);

}  // namespace simt::detail
