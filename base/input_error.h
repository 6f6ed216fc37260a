// The error every layer throws for bad input: a bad flag or config, a malformed or hostile
// file, a token id out of range, a run that cannot fit. The commands print what() on one line
// and exit non-zero; anything else escaping is a bug.
#pragma once
#include <stdexcept>

namespace tt {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace tt
