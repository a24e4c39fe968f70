#include "trainer/data/bpe_unicode.h"

#include <algorithm>
#include <array>

#include "trainer/data/bpe_unicode_tables.h"

namespace titan::bpe {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

bool in_ranges(char32_t cp, const CodeRange* ranges, size_t count) {
  // First range whose end is >= cp; cp is inside it when it also starts at or before cp.
  const CodeRange* end = ranges + count;
  const CodeRange* it =
      std::lower_bound(ranges, end, cp, [](const CodeRange& r, char32_t c) { return r.last < c; });
  return it != end && it->first <= cp;
}

bool continuation(const std::string& s, size_t i) {
  return i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80;
}

// The two directions of the byte map, built once.
struct ByteMap {
  std::array<char32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  std::array<int, 512> from_cp{};  // every image lies below U+0200

  ByteMap() {
    from_cp.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? static_cast<char32_t>(b) : next_extra++;
      from_cp[to_cp[b]] = b;
      append_utf8(to_cp[b], &to_utf8[b]);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

char32_t decode_utf8(const std::string& s, size_t i, size_t* len) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  *len = 1;
  if (c < 0x80) return c;
  size_t n;
  char32_t cp, min;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return kReplacement;
  }
  for (size_t k = 1; k < n; ++k) {
    if (!continuation(s, i + k)) return kReplacement;
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kReplacement;
  *len = n;
  return cp;
}

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';  // fast path for ASCII
  size_t count;
  const CodeRange* ranges = letter_ranges(&count);
  return in_ranges(cp, ranges, count);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  size_t count;
  const CodeRange* ranges = number_ranges(&count);
  return in_ranges(cp, ranges, count);
}

bool is_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

char32_t byte_to_codepoint(unsigned char b) { return byte_map().to_cp[b]; }

int codepoint_to_byte(char32_t cp) {
  return cp < byte_map().from_cp.size() ? byte_map().from_cp[cp] : -1;
}

const std::string& byte_symbol(unsigned char b) { return byte_map().to_utf8[b]; }

}  // namespace titan::bpe
