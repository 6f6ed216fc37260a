// Source lines of instructions (simt/symbolize.h), through addr2line, only when a report needs one.
#include "simt/symbolize.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

namespace simt::detail {

namespace {

std::unordered_map<const void*, uint16_t> g_site_numbers;
std::vector<const void*> g_sites{nullptr};  // site 0: unknown (also what the table gives when full)
std::unordered_map<uint16_t, std::string> g_lines;

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// addr2line's answer for one address of one object: "function\nfile:line (discriminator N)".
std::string addr2line(const std::string& object, uintptr_t address) {
  char command[1024];
  std::snprintf(command, sizeof command, "addr2line -C -f -e '%s' 0x%lx 2>/dev/null", object.c_str(),
                static_cast<unsigned long>(address));
  FILE* pipe = popen(command, "r");
  if (!pipe) return "";
  std::string out;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe)) out += buffer;
  pclose(pipe);
  return out;
}

std::string lookup(const void* pc) {
  Dl_info info{};
  if (!pc || !dladdr(pc, &info) || !info.dli_fbase) return "an unknown line";
  std::string object = info.dli_fname ? info.dli_fname : "";
  if (object.empty() || object[0] != '/') {  // the main program, named as it was started
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) object.assign(exe, static_cast<size_t>(n));
  }
  // A return address: the call is the instruction before it. A position-independent object
  // is looked up by its offset, a fixed-address executable by the address itself.
  const auto* header = static_cast<const ElfW(Ehdr)*>(info.dli_fbase);
  const uintptr_t address = reinterpret_cast<uintptr_t>(pc) - 1;
  const uintptr_t key = header->e_type == ET_EXEC ? address : address - reinterpret_cast<uintptr_t>(info.dli_fbase);
  const std::string answer = addr2line(object, key);
  const size_t newline = answer.find('\n');
  const std::string function = answer.substr(0, newline);
  std::string where = newline == std::string::npos ? "" : answer.substr(newline + 1);
  where = where.substr(0, where.find_first_of(" \n"));
  if (!where.empty() && where.rfind("??", 0) != 0) return base_name(where);
  if (!function.empty() && function != "??") return function + " (no line table)";
  return "an unknown line";
}

}  // namespace

SiteCacheEntry g_site_cache[kSiteCacheSize];

uint16_t site_of_uncached(const void* pc) {
  SiteCacheEntry& slot = g_site_cache[(reinterpret_cast<uintptr_t>(pc) >> 1) % kSiteCacheSize];
  auto found = g_site_numbers.find(pc);
  if (found != g_site_numbers.end()) {
    slot = {pc, found->second};
    return found->second;
  }
  if (g_sites.size() > UINT16_MAX) return 0;
  const uint16_t number = static_cast<uint16_t>(g_sites.size());
  g_sites.push_back(pc);
  g_site_numbers.emplace(pc, number);
  slot = {pc, number};
  return number;
}

std::string site_line(uint16_t site) {
  auto known = g_lines.find(site);
  if (known != g_lines.end()) return known->second;
  const std::string line = site < g_sites.size() ? lookup(g_sites[site]) : "an unknown line";
  g_lines.emplace(site, line);
  return line;
}

}  // namespace simt::detail
