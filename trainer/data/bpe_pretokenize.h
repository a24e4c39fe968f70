// The pre-tokenizer split patterns of byte-level BPE models (GPT-2, Llama 3 / GPT-4, Qwen2/3),
// implemented by hand because std::regex has no \p{L}; used by trainer/data/bpe_tokenizer.cpp.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace titan::bpe {

// Which of the known regexes splits text into pre-tokens (pieces BPE never merges across).
struct SplitRule {
  // kGpt4: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}
  //        | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  //        with D = max_digits (Llama 3: 3; Qwen2/Qwen3 write plain \p{N}: 1).
  // kGpt2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  //        (the ByteLevel pre-tokenizer's own regex, use_regex: true).
  enum class Style { kGpt2, kGpt4 };
  Style style = Style::kGpt4;
  int max_digits = 1;  // kGpt4 only
};

// The rule for a Split pre-tokenizer regex taken verbatim from a tokenizer.json, or nullopt
// when it is none of the patterns above.
std::optional<SplitRule> split_rule_for_regex(const std::string& regex);

// The regex text of a rule (for error messages listing what is supported).
std::string regex_of(const SplitRule& rule);

// End (byte offset) of the pre-token that starts at byte `begin` < text.size(): the match of
// the rule's regex there, taking alternatives leftmost-first as regex engines do. Every
// position matches one alternative, so repeated calls tile the text.
size_t next_pretoken_end(const std::string& text, size_t begin, const SplitRule& rule);

}  // namespace titan::bpe
