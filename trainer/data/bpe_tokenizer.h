// Loader for Hugging Face tokenizer.json files with a byte-level BPE model (Qwen2/Qwen3,
// Llama 3, GPT-2 kind); used by make_tokenizer in trainer/data/tokenizer.cpp.
//
// Read from the file: model.vocab, model.merges ("a b" strings or [a, b] pairs; a merge's rank
// is its index), model.ignore_merges, added_tokens (matched literally in the text before
// pre-tokenization, longest first, honouring lstrip/rstrip), and the pre_tokenizer: a
// ByteLevel step, optionally preceded by a Split whose regex is the GPT-4 style pattern of
// Llama 3 (\p{N}{1,3}) or Qwen2/Qwen3 (\p{N}); see bpe_pretokenize.h.
// The end-of-text id is the eos_token of a tokenizer_config.json beside the file when there is
// one, else the first of <|endoftext|>, <|end_of_text|>, </s>, <eos> that the file holds.
//
// Approximations (documented, not silent): an NFC normalizer is accepted but not applied (the
// text is taken to be NFC already, which holds for ASCII and most text); the post_processor is
// not applied (no BOS/EOS added by encode); added tokens' single_word flag is ignored and
// lstrip/rstrip strip ASCII white space only; BPE dropout is ignored (encoding is deterministic).
// Letters and numbers follow Unicode 14 (the Oniguruma regex engine that the Hugging Face
// library uses may follow a newer Unicode version).
#pragma once

#include <memory>
#include <string>

#include "trainer/data/tokenizer.h"

namespace titan {

// Throws a config titan::Error that names `path` and what is wrong (missing file, invalid JSON,
// model type other than BPE, unsupported pre-tokenizer, merges naming unknown tokens, ...).
std::unique_ptr<Tokenizer> load_bpe_tokenizer(const std::string& path);

}  // namespace titan
