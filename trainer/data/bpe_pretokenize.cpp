#include "trainer/data/bpe_pretokenize.h"

#include "trainer/data/bpe_unicode.h"

namespace titan::bpe {

namespace {

// A code point and where it ends; cp is 0 past the end of the text (matches no class).
struct Char {
  char32_t cp;
  size_t end;
};

Char at(const std::string& text, size_t i) {
  if (i >= text.size()) return {0, i};
  size_t len;
  char32_t cp = decode_utf8(text, i, &len);
  return {cp, i + len};
}

bool is_newline(char32_t cp) { return cp == '\r' || cp == '\n'; }
// [^\s\p{L}\p{N}]: punctuation, symbols, marks, controls that are not white space.
bool is_other(char32_t cp) { return !is_whitespace(cp) && !is_letter(cp) && !is_number(cp); }

template <typename Pred>
size_t skip_while(const std::string& text, size_t i, Pred pred) {
  for (Char c = at(text, i); i < text.size() && pred(c.cp); c = at(text, i)) i = c.end;
  return i;
}

char32_t fold(char32_t cp, bool ignore_case) {
  if (!ignore_case) return cp;
  if (cp == 0x17F) return 's';  // LATIN SMALL LETTER LONG S case-folds to 's'
  return cp < 0x80 && cp >= 'A' && cp <= 'Z' ? cp + ('a' - 'A') : cp;
}

// 's 't 're 've 'm 'll 'd after the apostrophe at `i`; returns the end or 0 for no match.
size_t contraction_end(const std::string& text, size_t i, bool ignore_case) {
  static const char* const kSuffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  if (text[i] != '\'') return 0;
  for (const char* suffix : kSuffixes) {
    size_t j = i + 1;
    const char* p = suffix;
    for (; *p; ++p) {
      Char c = at(text, j);
      if (j >= text.size() || fold(c.cp, ignore_case) != static_cast<char32_t>(*p)) break;
      j = c.end;
    }
    if (!*p) return j;
  }
  return 0;
}

// \s+(?!\S) then \s+: a run of white space gives back its last character when a non-space
// follows, so that character can lead the next piece (" word").
size_t whitespace_end(const std::string& text, size_t begin, size_t run_end) {
  if (run_end == text.size()) return run_end;
  size_t last = begin;
  for (size_t i = begin; i < run_end; i = at(text, i).end) last = i;
  return last > begin ? last : run_end;
}

size_t gpt4_end(const std::string& text, size_t begin, int max_digits) {
  Char c0 = at(text, begin);
  if (size_t e = contraction_end(text, begin, /*ignore_case=*/true)) return e;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (is_letter(c0.cp)) return skip_while(text, c0.end, is_letter);
  Char c1 = at(text, c0.end);
  if (!is_newline(c0.cp) && !is_number(c0.cp) && is_letter(c1.cp))
    return skip_while(text, c1.end, is_letter);
  // \p{N}{1,max_digits}
  if (is_number(c0.cp)) {
    size_t i = c0.end;
    for (int n = 1; n < max_digits && is_number(at(text, i).cp); ++n) i = at(text, i).end;
    return i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t j = c0.cp == ' ' ? c0.end : begin;
  if (is_other(at(text, j).cp)) {
    size_t i = skip_while(text, j, is_other);
    return skip_while(text, i, is_newline);
  }
  // Only white space is left. \s*[\r\n]+ ends after the run's last newline, if it has one.
  size_t run_end = begin, after_newline = 0;
  for (Char c = at(text, run_end); run_end < text.size() && is_whitespace(c.cp);
       c = at(text, run_end)) {
    run_end = c.end;
    if (is_newline(c.cp)) after_newline = run_end;
  }
  if (after_newline) return after_newline;
  return whitespace_end(text, begin, run_end);
}

size_t gpt2_end(const std::string& text, size_t begin) {
  if (size_t e = contraction_end(text, begin, /*ignore_case=*/false)) return e;
  Char c0 = at(text, begin);
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' share the optional leading space.
  Char c = c0.cp == ' ' ? at(text, c0.end) : c0;
  size_t start = c0.cp == ' ' ? c0.end : begin;
  if (is_letter(c.cp)) return skip_while(text, start, is_letter);
  if (is_number(c.cp)) return skip_while(text, start, is_number);
  if (is_other(c.cp)) return skip_while(text, start, is_other);
  return whitespace_end(text, begin, skip_while(text, begin, is_whitespace));
}

}  // namespace

std::string regex_of(const SplitRule& rule) {
  if (rule.style == SplitRule::Style::kGpt2)
    return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  std::string digits = rule.max_digits == 1 ? "" : "{1," + std::to_string(rule.max_digits) + "}";
  return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})" + digits +
         R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}

std::optional<SplitRule> split_rule_for_regex(const std::string& regex) {
  SplitRule gpt2{SplitRule::Style::kGpt2, 0};
  if (regex == regex_of(gpt2)) return gpt2;
  for (int digits = 1; digits <= 9; ++digits) {
    SplitRule rule{SplitRule::Style::kGpt4, digits};
    if (regex == regex_of(rule)) return rule;
  }
  return std::nullopt;
}

size_t next_pretoken_end(const std::string& text, size_t begin, const SplitRule& rule) {
  size_t end = rule.style == SplitRule::Style::kGpt2 ? gpt2_end(text, begin)
                                                     : gpt4_end(text, begin, rule.max_digits);
  // Defensive: the alternatives cover every character, but never return an empty piece.
  return end > begin ? end : at(text, begin).end;
}

}  // namespace titan::bpe
