// Sorted code point range tables (letters, numbers) generated from Unicode data; used only by
// trainer/data/bpe_unicode.cpp for is_letter / is_number.
#pragma once

#include <cstddef>

namespace titan::bpe {

struct CodeRange {
  char32_t first;
  char32_t last;  // inclusive
};

// Sorted, non-overlapping ranges; *count receives their number.
const CodeRange* letter_ranges(size_t* count);
const CodeRange* number_ranges(size_t* count);

}  // namespace titan::bpe
