// The byte tokenizer, the factory choosing between it and tokenizer.json, and file reading.
#include "trainer/data/tokenizer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "trainer/data/bpe_tokenizer.h"

namespace titan {

namespace {

// Ids 0..255 are the bytes themselves and 256 is eos: any byte string round-trips, which makes
// it the tokenizer for tests and for the shipped corpus with the debug model.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int64_t kEos = 256;

  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (int64_t id : ids) {
      TITAN_CHECK(id >= 0 && id <= kEos, "token id ", id, " is outside the byte tokenizer's ",
                  "range [0, ", kEos, "]");
      if (id != kEos) text.push_back(static_cast<char>(id));  // eos has no text
    }
    return text;
  }

  int64_t vocab_size() const override { return kEos + 1; }
  int64_t eos_id() const override { return kEos; }
  std::string name() const override { return "byte"; }
};

bool blank(const std::string& text, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i)
    if (text[i] != ' ' && text[i] != '\t' && text[i] != '\r') return false;
  return true;
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& path) {
  if (path.empty() || path == "byte") return std::make_unique<ByteTokenizer>();
  return load_bpe_tokenizer(path);
}

std::string read_text_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TITAN_CONFIG_CHECK(fs::exists(path, ec), what, " '", path, "' does not exist");
  TITAN_CONFIG_CHECK(!fs::is_directory(path, ec), what, " '", path, "' is a directory, not a file");
  // A FIFO blocks the open until a writer comes (forever, and the stop handler only notes
  // SIGTERM for a step end never reached: `timeout 20` could not end it, 730 s); a device such
  // as /dev/zero never ends. The whole file is read into memory, so only a regular one will do.
  const fs::file_type type = fs::status(path, ec).type();
  TITAN_CONFIG_CHECK(type == fs::file_type::regular, what, " '", path, "' is ",
                     type == fs::file_type::fifo         ? "a FIFO (named pipe)"
                     : type == fs::file_type::character  ? "a character device"
                     : type == fs::file_type::block      ? "a block device"
                     : type == fs::file_type::socket     ? "a socket"
                                                          : "not a regular file",
                     ", not a regular file (it is read whole at start)");
  std::ifstream in(path, std::ios::binary);
  TITAN_CONFIG_CHECK(in.is_open(), what, " '", path, "' cannot be opened: ", std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  TITAN_CONFIG_CHECK(!in.bad(), what, " '", path, "' could not be read: ", std::strerror(errno));
  return buffer.str();
}

std::vector<int64_t> tokenize_file(const Tokenizer& tok, const std::string& path) {
  std::string text = read_text_file(path, "dataset file");
  std::vector<int64_t> stream;
  std::string document;
  auto flush = [&] {
    if (document.empty()) return;
    std::vector<int64_t> ids = tok.encode(document);
    stream.insert(stream.end(), ids.begin(), ids.end());
    stream.push_back(tok.eos_id());
    document.clear();
  };
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    if (blank(text, begin, end)) {
      flush();
    } else {
      if (!document.empty()) document.push_back('\n');
      document.append(text, begin, end - begin);
    }
    begin = end + 1;
  }
  flush();
  TITAN_CONFIG_CHECK(!stream.empty(), "dataset file '", path,
                     "' holds no text (documents are separated by blank lines)");
  return stream;
}

}  // namespace titan
