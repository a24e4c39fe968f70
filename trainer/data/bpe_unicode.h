// UTF-8 decoding, the Unicode classes the BPE pre-tokenizer needs (\p{L}, \p{N}, \s) and the
// GPT-2 byte <-> unicode-symbol map; used by bpe_pretokenize.cpp and bpe_tokenizer.cpp (both in
// trainer/data/).
#pragma once

#include <cstddef>
#include <string>

namespace titan::bpe {

// Decodes the code point starting at s[i] and stores its length in *len. A byte that does not
// start a valid UTF-8 sequence decodes as U+FFFD with length 1, so arbitrary bytes still split
// into pieces (Hugging Face only ever sees valid UTF-8; this keeps encode total on any input).
char32_t decode_utf8(const std::string& s, size_t i, size_t* len);
void append_utf8(char32_t cp, std::string* out);

// Unicode general category L* (letters) and N* (numbers), from the Unicode 14 tables in
// bpe_unicode_tables.cpp, and the White_Space property that Oniguruma's \s uses (the regex
// engine of the Hugging Face tokenizers library).
bool is_letter(char32_t cp);
bool is_number(char32_t cp);
bool is_whitespace(char32_t cp);

// The ByteLevel mapping of GPT-2: every byte gets a printable code point so that BPE symbols
// are strings without spaces or control characters. Bytes that are printable Latin-1
// ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves; the other 68 map, in byte
// order, to U+0100, U+0101, ...
char32_t byte_to_codepoint(unsigned char b);
// The inverse; -1 when cp is not the image of any byte.
int codepoint_to_byte(char32_t cp);
// UTF-8 of byte_to_codepoint(b).
const std::string& byte_symbol(unsigned char b);

}  // namespace titan::bpe
