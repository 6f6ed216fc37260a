// libFuzzer target: any bytes as the text of a model config, an optimizer config and a
// metadata count (the JSON and integer text a reference's metadata holds). The contract
// under test (base/checked_input.h, engine/config.h): the only exception is InputError,
// and no sanitizer report: no float-to-int cast out of range, no overflow.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/checked_input.h"
#include "engine/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tt;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    model_config_from_json(text, "fuzz-input");
  } catch (const InputError&) {
  }
  try {
    adamw_config_from_json(text, "fuzz-input");
  } catch (const InputError&) {
  }
  try {
    parse_integer(text, 1, INT_MAX, "fuzz-input");
  } catch (const InputError&) {
  }
  return 0;
}
