#include "tests/text_match.h"

#include <regex>

namespace tt::test {
namespace {

std::vector<std::string> groups(const std::smatch& m) {
  std::vector<std::string> out;
  out.reserve(m.size());
  for (const std::ssub_match& group : m) out.push_back(group.str());
  return out;
}

}  // namespace

std::optional<std::vector<std::string>> regex_match_groups(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_match(text, m, std::regex(pattern))) return std::nullopt;
  return groups(m);
}

std::optional<std::vector<std::string>> regex_search_groups(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return std::nullopt;
  return groups(m);
}

std::string regex_replace_all(const std::string& text, const std::string& pattern, const std::string& replacement) {
  return std::regex_replace(text, std::regex(pattern), replacement);
}

}  // namespace tt::test
