// Encoding and decoding with a loaded BpeModel: added tokens, then pre-tokenization, then BPE
// merges in rank order within each pre-token.
#include "trainer/data/bpe_tokenizer.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <tuple>

#include "common/error.h"
#include "trainer/data/bpe_model.h"
#include "trainer/data/bpe_unicode.h"

namespace titan {

namespace {

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(bpe::BpeModel model) : m_(std::move(model)) {
    // Longest first, so that of two added tokens starting at one place the longer wins
    // (Hugging Face matches added tokens leftmost-longest).
    std::sort(m_.added.begin(), m_.added.end(),
              [](const bpe::AddedToken& a, const bpe::AddedToken& b) {
                return a.content.size() > b.content.size();
              });
    for (size_t i = 0; i < m_.added.size(); ++i)
      added_by_first_byte_[static_cast<unsigned char>(m_.added[i].content[0])].push_back(i);
  }

  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> out;
    size_t segment = 0;  // start of the text not yet encoded
    for (size_t i = 0; i < text.size();) {
      const bpe::AddedToken* tok = added_at(text, i);
      if (!tok) {
        ++i;
        continue;
      }
      size_t start = i, end = i + tok->content.size();
      if (tok->lstrip)
        while (start > segment && ascii_space(text[start - 1])) --start;
      if (tok->rstrip)
        while (end < text.size() && ascii_space(text[end])) ++end;
      encode_segment(text.substr(segment, start - segment), &out);
      out.push_back(tok->id);
      i = segment = end;
    }
    encode_segment(text.substr(segment), &out);
    return out;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string out;
    for (int64_t id : ids) {
      TITAN_CHECK(id >= 0 && id < vocab_size() && !m_.id_to_token[id].empty(), "token id ", id,
                  " is not in the vocabulary of ", name());
      const std::string& token = m_.id_to_token[id];
      if (m_.id_is_added[id] || !append_bytes(token, &out)) out += token;
    }
    return out;
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(m_.id_to_token.size()); }
  int64_t eos_id() const override { return m_.eos_id; }
  std::string name() const override { return "hf-bpe:" + m_.path; }

 private:
  // The longest added token starting at text[i], or null.
  const bpe::AddedToken* added_at(const std::string& text, size_t i) const {
    for (size_t k : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const std::string& c = m_.added[k].content;
      if (text.compare(i, c.size(), c) == 0) return &m_.added[k];
    }
    return nullptr;
  }

  // Text between added tokens: pre-tokenize, then BPE each piece.
  void encode_segment(std::string segment, std::vector<int64_t>* out) const {
    if (segment.empty()) return;
    if (m_.add_prefix_space && segment[0] != ' ') segment.insert(segment.begin(), ' ');
    for (size_t begin = 0; begin < segment.size();) {
      size_t end = m_.split ? bpe::next_pretoken_end(segment, begin, *m_.split) : segment.size();
      encode_piece(segment, begin, end, out);
      begin = end;
    }
  }

  void encode_piece(const std::string& text, size_t begin, size_t end,
                    std::vector<int64_t>* out) const {
    if (m_.ignore_merges) {
      std::string symbols;
      for (size_t i = begin; i < end; ++i)
        symbols += bpe::byte_symbol(static_cast<unsigned char>(text[i]));
      auto it = m_.vocab.find(symbols);
      if (it != m_.vocab.end()) {
        out->push_back(it->second);
        return;
      }
    }
    // Symbols form a linked list over byte positions; a merge keeps the left position alive.
    size_t n = end - begin;
    std::vector<uint32_t> id(n);
    std::vector<size_t> prev(n), next(n);
    std::vector<char> alive(n, 1);
    for (size_t i = 0; i < n; ++i) {
      id[i] = m_.byte_ids[static_cast<unsigned char>(text[begin + i])];
      prev[i] = i - 1;  // wraps to SIZE_MAX for the first: "none"
      next[i] = i + 1 < n ? i + 1 : SIZE_MAX;
    }
    // Candidates ordered by (rank, position): the lowest-ranked pair merges first and, among
    // equal ranks, the leftmost, as in the Hugging Face BPE model. Stale entries are skipped.
    using Candidate = std::tuple<uint32_t, size_t, uint32_t>;  // rank, left position, result
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    auto push = [&](size_t left) {
      if (left == SIZE_MAX || next[left] == SIZE_MAX) return;
      auto it = m_.merges.find(bpe::merge_key(id[left], id[next[left]]));
      if (it != m_.merges.end()) queue.emplace(it->second.rank, left, it->second.result);
    };
    for (size_t i = 0; i + 1 < n; ++i) push(i);
    while (!queue.empty()) {
      auto [rank, left, result] = queue.top();
      queue.pop();
      if (!alive[left] || next[left] == SIZE_MAX) continue;
      size_t right = next[left];
      auto it = m_.merges.find(bpe::merge_key(id[left], id[right]));
      if (it == m_.merges.end() || it->second.rank != rank || it->second.result != result)
        continue;  // the pair changed since this candidate was queued
      id[left] = result;
      alive[right] = 0;
      next[left] = next[right];
      if (next[left] != SIZE_MAX) prev[next[left]] = left;
      push(prev[left]);
      push(left);
    }
    for (size_t i = 0; i != SIZE_MAX; i = next[i]) out->push_back(id[i]);
  }

  // Byte-level symbols back to bytes; false when a character is not a byte image (Hugging
  // Face's ByteLevel decoder then emits the token text unchanged, and so do we).
  static bool append_bytes(const std::string& token, std::string* out) {
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      size_t len;
      int b = bpe::codepoint_to_byte(bpe::decode_utf8(token, i, &len));
      if (b < 0) return false;
      bytes.push_back(static_cast<char>(b));
      i += len;
    }
    *out += bytes;
    return true;
  }

  bpe::BpeModel m_;
  std::vector<size_t> added_by_first_byte_[256];  // indices into m_.added, longest first
};

}  // namespace

std::unique_ptr<Tokenizer> load_bpe_tokenizer(const std::string& path) {
  return std::make_unique<BpeTokenizer>(bpe::load_bpe_model(path));
}

}  // namespace titan
