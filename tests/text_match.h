// Regular expressions for the tests, compiled once: <regex> costs seconds of compile time in
// every file that instantiates it (the 7 suites that did took 101 s of CPU with g++ -O3, 72 s
// once they called these), so only tests/text_match.cpp includes it and the test executables
// link it (tests/CMakeLists.txt). The patterns are std::regex's default grammar, ECMAScript.
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
