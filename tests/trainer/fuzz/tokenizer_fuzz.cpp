// libFuzzer target: the Hugging Face tokenizer.json loader and the BPE encoder it builds
// (trainer/data). Any input must load or end in a titan::Error; another exception, a crash
// or a sanitizer report is a finding. Built and run by launch/fuzz.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "common/error.h"
#include "trainer/data/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The loader reads a path (it also looks for tokenizer_config.json beside it): one
  // private folder per process.
  static const std::string dir = [] {
    char tmpl[] = "/tmp/titan-fuzz-tok-XXXXXX";
    return std::string(mkdtemp(tmpl));
  }();
  const std::string path = dir + "/tokenizer.json";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    auto tok = titan::load_bpe_tokenizer(path);
    const auto ids = tok->encode("Hello world, fuzz! 123 \xc3\xa9t\xc3\xa9");
    (void)tok->decode(ids);
  } catch (const titan::Error&) {
  }
  return 0;
}
