// Regular expressions for the tests, compiled once: <regex> costs several seconds of compile
// time in every file that instantiates it (one std::regex_search alone about 3.5 s with g++ at
// -O3, 4.4 s with clang and AddressSanitizer), so only tests/text_match.cpp includes it and the
// test executables link it (tests/CMakeLists.txt). The patterns are std::regex's default
// grammar, ECMAScript, as the tests wrote them with std::regex before.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace tt::test {

// The groups when `pattern` matches the whole of `text` (std::regex_match): [0] is the whole
// text, [i] group i ("" when the group took no part in the match); nullopt when it does not match.
std::optional<std::vector<std::string>> regex_match_groups(const std::string& text, const std::string& pattern);

// The same for the first place `pattern` matches inside `text` (std::regex_search).
std::optional<std::vector<std::string>> regex_search_groups(const std::string& text, const std::string& pattern);

// `text` with every match of `pattern` replaced by `replacement` (std::regex_replace).
std::string regex_replace_all(const std::string& text, const std::string& pattern, const std::string& replacement);

}  // namespace tt::test
