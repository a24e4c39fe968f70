// Tests for trainer/data/tokenizer.h: the byte tokenizer, a byte-level BPE tokenizer.json that the
// test writes (expected ids derived by hand below), error messages, and the shipped corpus.
#include "trainer/data/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tests/error_of.h"

namespace TITAN_UNIT_ID {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int64_t>;

// The GPT-2 byte -> code point map, written out again from its definition so that the test
// does not trust the implementation's table.
std::string byte_symbol(int b) {
  auto printable = [](int x) {
    return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174;
  };
  int cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int x = 0; x < b; ++x) cp += printable(x) ? 0 : 1;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Merges of the test vocabulary in rank order; merge k creates id 256 + k.
// "Ġ" is the symbol of ' ', "Ċ" of '\n', "Ã" and "©" of the two bytes of 'é' (C3 A9).
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"Ġ", "t"},     // 256 "Ġt"
    {"h", "e"},     // 257 "he"
    {"Ġt", "he"},   // 258 "Ġthe"
    {"l", "l"},     // 259 "ll"
    {"e", "l"},     // 260 "el": ranks after "he", so "help" -> he l p
    {"he", "ll"},   // 261 "hell"
    {"hell", "o"},  // 262 "hello"
    {"Ã", "©"},     // 263 "é"
    {"1", "2"},     // 264 "12"
    {"3", "4"},     // 265 "34"
    {"Ġ", "Ġ"},     // 266 two spaces
    {"n", "'"},     // 267 "n'": only reachable if "don't" is not split before "'t"
    {"'", "t"},     // 268 "'t"
    {"Ċ", "Ċ"},     // 269 two newlines
};
constexpr int64_t kXyz = 299;        // in the vocab, reachable by no merge (ignore_merges)
constexpr int64_t kEndOfText = 300;  // added special token
constexpr int64_t kStripped = 301;   // added token "<|x|>" with lstrip and rstrip

const char* const kQwenRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string json_escape_regex(const std::string& regex) {
  std::string out;
  for (char c : regex) {
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

struct Spec {
  std::string regex = kQwenRegex;  // "" : GPT-2 style ByteLevel with use_regex true
  bool pair_merges = false;        // [a, b] instead of "a b"
  bool ignore_merges = false;
  std::vector<std::string> extra_merges;  // appended verbatim (JSON values)
};

std::string tokenizer_json(const Spec& spec) {
  std::string vocab;
  for (int b = 0; b < 256; ++b) vocab += quoted(byte_symbol(b)) + ": " + std::to_string(b) + ", ";
  std::string merges;
  for (size_t k = 0; k < kMerges.size(); ++k) {
    const auto& [l, r] = kMerges[k];
    vocab += quoted(l + r) + ": " + std::to_string(256 + k) + ", ";
    merges += spec.pair_merges ? "[" + quoted(l) + ", " + quoted(r) + "]" : quoted(l + " " + r);
    merges += k + 1 < kMerges.size() ? ", " : "";
  }
  for (const std::string& m : spec.extra_merges) merges += ", " + m;
  vocab += "\"xyz\": " + std::to_string(kXyz);
  std::string pre =
      spec.regex.empty()
          ? R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, )"
            R"("use_regex": true})"
          : R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ")" +
                json_escape_regex(spec.regex) +
                R"("}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", )"
                R"("add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})";
  return R"({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [)"
         R"({"id": 300, "content": "<|endoftext|>", "single_word": false, "lstrip": false, )"
         R"("rstrip": false, "normalized": false, "special": true}, )"
         R"({"id": 301, "content": "<|x|>", "lstrip": true, "rstrip": true, "special": true}], )"
         R"("normalizer": {"type": "NFC"}, "pre_tokenizer": )" +
         pre +
         R"(, "post_processor": null, "decoder": {"type": "ByteLevel"}, )"
         R"("model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false, )"
         R"("ignore_merges": )" +
         (spec.ignore_merges ? "true" : "false") + R"(, "vocab": {)" + vocab + R"(}, "merges": [)" +
         merges + "]}}";
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "titan_tokenizer_XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::string file = path_ + "/" + name;
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::unique_ptr<titan::Tokenizer> load(const TempDir& dir, const Spec& spec) {
  return titan::make_tokenizer(dir.write("tokenizer.json", tokenizer_json(spec)));
}

using titan::error_of;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

const std::vector<std::string> kRoundTrip = {
    "",
    "Hello, world! The quick brown fox jumps over 1234 lazy dogs.\n\n  Indented\ttab\r\n",
    "don't STOP, it's 99% done; we'll see...   \n",
    "caf\xC3\xA9 na\xC3\xAFve \xCE\xB1\xCE\xB2\xCE\xB3 \xD0\xB4\xD0\xB0",  // é ï αβγ да
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C 42",     // 你好，世界 42
    "emoji \xF0\x9F\x99\x82 and e\xCC\x81 (combining)",                    // 🙂, e + U+0301
    "bad bytes \xFF\xFE\xC3 end",                                          // not valid UTF-8
};

TEST(ByteTokenizer, RoundTripsAnyBytes) {
  auto tok = titan::make_tokenizer("");
  EXPECT_EQ(tok->name(), "byte");
  EXPECT_EQ(tok->vocab_size(), 257);
  EXPECT_EQ(tok->eos_id(), 256);
  EXPECT_EQ(tok->encode("A\xC3\xA9"), (Ids{65, 0xC3, 0xA9}));
  for (const std::string& text : kRoundTrip) EXPECT_EQ(tok->decode(tok->encode(text)), text);
  EXPECT_EQ(titan::make_tokenizer("byte")->decode({104, 105, 256}), "hi");  // eos has no text
  EXPECT_CONTAINS(error_of([&] { tok->decode({257}); }), "token id 257");
}

TEST(BpeTokenizer, ReadsVocabAddedTokensAndEos) {
  TempDir dir;
  auto tok = load(dir, {});
  EXPECT_EQ(tok->vocab_size(), 302);
  EXPECT_EQ(tok->eos_id(), kEndOfText);
  EXPECT_CONTAINS(tok->name(), "tokenizer.json");
}

TEST(BpeTokenizer, EosComesFromTokenizerConfigBesideTheFile) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"eos_token": {"content": "<|x|>"}})");
  EXPECT_EQ(load(dir, {})->eos_id(), kStripped);
  dir.write("tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  std::string msg = error_of([&] { load(dir, {}); });
  EXPECT_CONTAINS(msg, "tokenizer_config.json");
  EXPECT_CONTAINS(msg, "eos_token '<|nope|>' is not a token");
}

TEST(BpeTokenizer, MergesInRankOrderWithinPreTokens) {
  TempDir dir;
  auto tok = load(dir, {});
  EXPECT_EQ(tok->encode("hello the"), (Ids{262, 258}));  // "hello" " the"
  EXPECT_EQ(tok->encode("help"), (Ids{257, 'l', 'p'}));  // h+e (rank 1) beats e+l (rank 4)
  EXPECT_EQ(tok->encode("caf\xC3\xA9"), (Ids{'c', 'a', 'f', 263}));
  EXPECT_EQ(tok->encode("a   b"), (Ids{'a', 266, ' ', 'b'}));  // "a" "  " " b"
  EXPECT_EQ(tok->encode("don't"), (Ids{'d', 'o', 'n', 268}));  // "don" "'t"
  EXPECT_EQ(tok->encode("x\n\ny"), (Ids{'x', 269, 'y'}));      // \s*[\r\n]+ keeps "\n\n"
  EXPECT_EQ(tok->encode("1234"), (Ids{'1', '2', '3', '4'}));   // Qwen: one digit per piece
  EXPECT_EQ(tok->encode("xyz"), (Ids{'x', 'y', 'z'}));         // no merge reaches "xyz"
}

TEST(BpeTokenizer, PairFormMergesEncodeTheSame) {
  TempDir dir;
  Spec spec;
  spec.pair_merges = true;
  auto tok = load(dir, spec);
  EXPECT_EQ(tok->encode("hello the"), (Ids{262, 258}));
  EXPECT_EQ(tok->encode("help caf\xC3\xA9"), (Ids{257, 'l', 'p', ' ', 'c', 'a', 'f', 263}));
}

TEST(BpeTokenizer, Llama3AndGpt2SplitRules) {
  TempDir dir;
  Spec llama;
  llama.regex = kLlama3Regex;
  llama.ignore_merges = true;
  auto tok = load(dir, llama);
  EXPECT_EQ(tok->encode("1234"), (Ids{264, '3', '4'}));  // "123" "4": 3 and 4 never meet
  EXPECT_EQ(tok->encode("xyz"), (Ids{kXyz}));            // ignore_merges: whole word in vocab
  Spec gpt2;
  gpt2.regex = "";
  tok = load(dir, gpt2);
  EXPECT_EQ(tok->encode("1234"), (Ids{264, 265}));                // \p{N}+ keeps one piece
  EXPECT_EQ(tok->encode("x\n\ny"), (Ids{'x', '\n', '\n', 'y'}));  // "\n" "\n" "y"
  EXPECT_EQ(tok->encode("hello the"), (Ids{262, 258}));
}

TEST(BpeTokenizer, AddedTokensSplitTheText) {
  TempDir dir;
  auto tok = load(dir, {});
  EXPECT_EQ(tok->encode("a<|endoftext|>b"), (Ids{'a', kEndOfText, 'b'}));
  EXPECT_EQ(tok->encode("a <|x|>  b"), (Ids{'a', kStripped, 'b'}));  // lstrip and rstrip
  EXPECT_EQ(tok->encode("<|endoftext"),
            (Ids{'<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't'}));
  EXPECT_EQ(tok->decode({'a', kEndOfText, 262}), "a<|endoftext|>hello");
}

TEST(BpeTokenizer, DecodeInvertsEncode) {
  TempDir dir;
  for (const std::string& regex :
       {std::string(kQwenRegex), std::string(kLlama3Regex), std::string()}) {
    Spec spec;
    spec.regex = regex;
    auto tok = load(dir, spec);
    for (const std::string& text : kRoundTrip) EXPECT_EQ(tok->decode(tok->encode(text)), text);
  }
  auto tok = load(dir, {});
  EXPECT_CONTAINS(error_of([&] { tok->decode({250, 290}); }), "token id 290");
}

TEST(TokenizerErrors, NameTheFileAndTheProblem) {
  TempDir dir;
  std::string missing = dir.path() + "/nope/tokenizer.json";
  std::string msg = error_of([&] { titan::make_tokenizer(missing); });
  EXPECT_CONTAINS(msg, missing);
  EXPECT_CONTAINS(msg, "does not exist");

  EXPECT_CONTAINS(error_of([&] { titan::make_tokenizer(dir.path()); }), "is a directory");

  std::string bad = dir.write("bad.json", "{\"model\": {\"type\": \"BPE\",");
  msg = error_of([&] { titan::make_tokenizer(bad); });
  EXPECT_CONTAINS(msg, bad);
  EXPECT_CONTAINS(msg, "is not valid JSON");

  std::string wp = dir.write("wp.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  msg = error_of([&] { titan::make_tokenizer(wp); });
  EXPECT_CONTAINS(msg, wp);
  EXPECT_CONTAINS(msg, "model type 'WordPiece' is not supported");

  Spec unknown_right;
  unknown_right.extra_merges = {"\"q zz\""};
  msg = error_of([&] { load(dir, unknown_right); });
  EXPECT_CONTAINS(msg, "tokenizer.json");
  EXPECT_CONTAINS(msg, "model.merges[14] names the unknown right token 'zz'");

  Spec unknown_result;
  unknown_result.pair_merges = true;
  unknown_result.extra_merges = {R"(["q", "z"])"};
  EXPECT_CONTAINS(error_of([&] { load(dir, unknown_result); }),
                  "model.merges[14] names the unknown merged token 'qz'");

  Spec malformed_merge;
  malformed_merge.extra_merges = {"\"qz\""};
  EXPECT_CONTAINS(error_of([&] { load(dir, malformed_merge); }),
                  "model.merges[14] = \"qz\" is not of the form \"left right\"");

  Spec other_regex;
  other_regex.regex = R"(\w+|\s+)";
  EXPECT_CONTAINS(error_of([&] { load(dir, other_regex); }),
                  "is not supported; supported: Llama 3");

  std::string no_bytes =
      dir.write("nobytes.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, )"
                                R"("pre_tokenizer": {"type": "ByteLevel"}})");
  EXPECT_CONTAINS(error_of([&] { titan::make_tokenizer(no_bytes); }),
                  "not a byte-level BPE vocabulary");

  msg = error_of([&] { titan::tokenize_file(*titan::make_tokenizer(""), missing); });
  EXPECT_CONTAINS(msg, "dataset file '" + missing + "' does not exist");
  std::string empty = dir.write("empty.txt", "\n  \n");
  EXPECT_CONTAINS(error_of([&] { titan::tokenize_file(*titan::make_tokenizer(""), empty); }),
                  "holds no text");
}

TEST(TokenizeFile, SeparatesDocumentsWithEos) {
  TempDir dir;
  std::string file = dir.write("docs.txt", "ab\ncd\n\n \n\nef\n");
  auto tok = titan::make_tokenizer("byte");
  EXPECT_EQ(titan::tokenize_file(*tok, file), (Ids{'a', 'b', '\n', 'c', 'd', 256, 'e', 'f', 256}));
}

TEST(Corpus, ShippedCorpusIsOneToThreeMegabytesAndTokenizes) {
  std::string path = std::string(TITAN_SOURCE_DIR) + "/trainer/data/corpus.txt";
  ASSERT_TRUE(fs::exists(path)) << path;
  auto size = fs::file_size(path);
  EXPECT_GE(size, 1u << 20);
  EXPECT_LE(size, 3u << 20);
  auto tok = titan::make_tokenizer("");
  Ids stream = titan::tokenize_file(*tok, path);
  int64_t documents = std::count(stream.begin(), stream.end(), tok->eos_id());
  EXPECT_GT(documents, 1000);
  EXPECT_EQ(stream.back(), tok->eos_id());
  EXPECT_GT(static_cast<int64_t>(stream.size()), static_cast<int64_t>(size * 9 / 10));
}

}  // namespace
}  // namespace TITAN_UNIT_ID
