// Tokenizer interface, its factory and the text-file reader; used by the data loader (trainer/)
// and by tests/trainer/tokenizer_test.cpp. No torch here: ids are plain int64_t vectors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace titan {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Plain text to ids. Adds no BOS/EOS: the loader decides where documents end.
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  // Ids to bytes. The result may be invalid UTF-8 when ids cut a multi-byte character;
  // it is returned as is (not replaced by U+FFFD) so that decode(encode(x)) == x for any bytes.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t eos_id() const = 0;  // appended after each document by tokenize_file
  virtual std::string name() const = 0;
};

// path == "" or "byte": the byte-level tokenizer (ids 0..255 are bytes, 256 is eos: 257 ids).
// Otherwise a Hugging Face tokenizer.json holding a byte-level BPE model (Qwen2/Qwen3, Llama 3,
// GPT-2 kind); see trainer/data/bpe_tokenizer.h for what is read and what is approximated.
// Throws a config titan::Error naming the file for a missing file, bad JSON or unsupported model.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& path);

// Reads a whole file as bytes. `what` names the file's role in errors ("dataset file", ...).
// Throws a config titan::Error naming the path when it is missing, a directory or unreadable.
std::string read_text_file(const std::string& path, const std::string& what);

// Tokenizes a text file into one stream. Documents are separated by blank lines (lines holding
// only spaces, tabs or '\r'); each document is its lines joined by '\n', followed by eos_id().
// A file with no document is an error, since no training stream could come from it.
std::vector<int64_t> tokenize_file(const Tokenizer& tok, const std::string& path);

}  // namespace titan
