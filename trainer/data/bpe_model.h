// The tables of a byte-level BPE tokenizer as read from a tokenizer.json: filled by
// bpe_load.cpp, used by the encoder/decoder in bpe_tokenizer.cpp (both in trainer/data/).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainer/data/bpe_pretokenize.h"

namespace titan::bpe {

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool lstrip = false;  // absorbs the white space before it
  bool rstrip = false;  // absorbs the white space after it
};

struct Merge {
  uint32_t rank;    // lower merges first
  uint32_t result;  // id of the merged symbol
};

// Merges are looked up by the ids of the two symbols, packed into one key.
inline uint64_t merge_key(uint32_t left, uint32_t right) {
  return (static_cast<uint64_t>(left) << 32) | right;
}

struct BpeModel {
  std::string path;
  std::unordered_map<std::string, int64_t> vocab;  // byte-level symbol string -> id
  std::unordered_map<uint64_t, Merge> merges;
  std::array<uint32_t, 256> byte_ids{};  // id of each single-byte symbol
  std::vector<AddedToken> added;
  std::optional<SplitRule> split;  // nullopt: a text segment is one pre-token
  bool add_prefix_space = false;   // GPT-2 ByteLevel: a segment not starting with ' ' gets one
  bool ignore_merges = false;      // Llama 3: a pre-token found whole in vocab skips BPE
  std::vector<std::string> id_to_token;  // "" for ids nothing maps to
  std::vector<char> id_is_added;         // decode added tokens' content verbatim
  int64_t eos_id = -1;
};

// Parses and validates `path`; throws a config titan::Error naming the file and the problem.
BpeModel load_bpe_model(const std::string& path);

}  // namespace titan::bpe
