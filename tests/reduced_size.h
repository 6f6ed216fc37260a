// The few tests that are slowest under the sanitizers run at a reduced size there:
// scripts/test_sanitizers.sh sets TINYTRAIN_TEST_REDUCED, and its header lists which tests
// shrink and how (each one's comment says why its check still holds).
#pragma once
#include <cstdlib>

namespace tt::test {

inline bool reduced_size() { return std::getenv("TINYTRAIN_TEST_REDUCED") != nullptr; }

}  // namespace tt::test
