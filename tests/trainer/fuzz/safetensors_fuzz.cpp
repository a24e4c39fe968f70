// libFuzzer target: the safetensors header checks (trainer/checkpoint/safetensors_header.h)
// on a whole file's bytes: 8-byte length, JSON header, data. Any input must parse or end in a
// titan::Error; another exception, a crash or a sanitizer report is a finding. Built and run
// by launch/fuzz.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.h"
#include "trainer/checkpoint/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t n = 0;
  std::memcpy(&n, data, 8);
  if (n > size - 8) return 0;  // load_safetensors refuses these before parsing
  const std::string header(reinterpret_cast<const char*>(data) + 8, n);
  try {
    (void)titan::parse_safetensors_header(header, static_cast<int64_t>(size - 8 - n), "fuzz.safetensors");
  } catch (const titan::Error&) {
  }
  return 0;
}
