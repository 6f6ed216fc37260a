// libFuzzer target: any bytes as a safetensors file, then as a tinytrain reference.
// The contract under test (engine/io/safetensors.h, engine/io/reference.h): whatever the bytes,
// the only exception is InputError, no sanitizer report, and no allocation larger than the
// input can justify (run_fuzz.sh sets libFuzzer's -malloc_limit_mb to catch one).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/config.h"
#include "engine/io/reference.h"
#include "engine/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tt;
  try {
    SafetensorsFile file = SafetensorsFile::parse("fuzz-input", std::vector<char>(data, data + size));
    // Every tensor tinytrain has a dtype for, read with the dtype and shape the header gives:
    // open() promised the bytes are there.
    for (const std::string& name : file.names()) {
      const SafetensorsEntry& entry = file.entry(name);
      for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::I32}) {
        if (entry.dtype != dtype_name(dtype)) continue;
        std::vector<char> bytes(entry.end - entry.begin);
        file.read(name, dtype, entry.shape, bytes.data());
      }
    }
    Reference::check(std::move(file));
  } catch (const InputError&) {
    // the documented outcome for bad input
  }
  return 0;
}
