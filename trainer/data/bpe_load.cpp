// Parsing and validation of tokenizer.json into a BpeModel (see bpe_tokenizer.h for what is
// supported). Every error names the file, since a run may load several JSON files.
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "trainer/data/bpe_model.h"
#include "trainer/data/bpe_unicode.h"
#include "trainer/data/tokenizer.h"

namespace titan::bpe {

namespace {

using json = nlohmann::json;

// Ids index dense tables; a larger id is a corrupt file rather than a real vocabulary.
constexpr int64_t kMaxId = int64_t{1} << 30;

json parse_json_file(const std::string& path, const std::string& what) {
  std::string text = read_text_file(path, what);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    TITAN_CONFIG_FAIL(what, " '", path, "' is not valid JSON: ", e.what());
  }
}

std::string type_of(const json& node) {
  if (node.is_object() && node.contains("type") && node["type"].is_string())
    return node["type"].get<std::string>();
  return node.is_null() ? "null" : node.dump();
}

bool flag(const json& node, const char* key, bool fallback) {
  if (!node.contains(key) || node[key].is_null()) return fallback;
  return node[key].get<bool>();
}

class Loader {
 public:
  explicit Loader(const std::string& path) { model_.path = path; }

  BpeModel load() {
    json root = parse_json_file(model_.path, "tokenizer file");
    check(root.is_object(), "the top level is not a JSON object");
    try {
      read_model(root);
      read_added_tokens(root);
      read_normalizer(root);
      read_pre_tokenizer(root);
      build_id_table();
      find_eos();
    } catch (const json::exception& e) {
      // Wrong JSON types inside an otherwise parseable file (e.g. a string where an id goes).
      check(false, "unexpected JSON structure: ", e.what());
    }
    return std::move(model_);
  }

 private:
  template <typename... Args>
  void check(bool ok, const Args&... args) {
    TITAN_CONFIG_CHECK(ok, "tokenizer file '", model_.path, "': ", args...);
  }

  void read_model(const json& root) {
    check(root.contains("model") && root["model"].is_object(), "has no \"model\" object");
    const json& m = root["model"];
    std::string type = m.value("type", "BPE");
    check(type == "BPE", "model type '", type,
          "' is not supported; only byte-level BPE models (Qwen2/Qwen3, Llama 3, GPT-2 kind) are");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      check(!m.contains(key) || m[key].is_null() || m[key] == "", "model.", key,
            " is set; byte-level BPE models do not use it and it is not supported");
    model_.ignore_merges = flag(m, "ignore_merges", false);

    check(m.contains("vocab") && m["vocab"].is_object(), "model.vocab is missing or not an object");
    for (const auto& [token, id] : m["vocab"].items()) {
      check(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < kMaxId,
            "model.vocab id of '", token, "' is ", id.dump(), ", not an integer in [0, ", kMaxId,
            ")");
      model_.vocab[token] = id.get<int64_t>();
    }
    for (int b = 0; b < 256; ++b) {
      auto it = model_.vocab.find(byte_symbol(static_cast<unsigned char>(b)));
      check(it != model_.vocab.end(), "model.vocab lacks the symbol '",
            byte_symbol(static_cast<unsigned char>(b)), "' of byte ", b,
            ", so it is not a byte-level BPE vocabulary");
      model_.byte_ids[b] = static_cast<uint32_t>(it->second);
    }
    read_merges(m);
  }

  void read_merges(const json& m) {
    check(m.contains("merges") && m["merges"].is_array(), "model.merges is missing or not a list");
    const json& merges = m["merges"];
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const json& entry = merges[rank];
      std::string left, right;
      if (entry.is_string()) {  // "left right": byte-level symbols never contain a space
        std::string s = entry.get<std::string>();
        size_t space = s.find(' ');
        check(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
              "model.merges[", rank, "] = ", entry.dump(), " is not of the form \"left right\"");
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else {
        check(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string(),
              "model.merges[", rank, "] = ", entry.dump(), " is neither \"left right\" nor a pair");
        left = entry[0].get<std::string>();
        right = entry[1].get<std::string>();
      }
      uint32_t l = vocab_id(left, rank, "left");
      uint32_t r = vocab_id(right, rank, "right");
      uint32_t result = vocab_id(left + right, rank, "merged");
      // A repeated pair takes the later rank, as the Hugging Face loader's map insertion does.
      model_.merges[merge_key(l, r)] = Merge{static_cast<uint32_t>(rank), result};
    }
  }

  uint32_t vocab_id(const std::string& token, size_t rank, const char* role) {
    auto it = model_.vocab.find(token);
    check(it != model_.vocab.end(), "model.merges[", rank, "] names the unknown ", role, " token '",
          token, "' (not in model.vocab)");
    return static_cast<uint32_t>(it->second);
  }

  void read_added_tokens(const json& root) {
    if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return;
    check(root["added_tokens"].is_array(), "added_tokens is not a list");
    for (const json& t : root["added_tokens"]) {
      check(t.is_object() && t.contains("id") && t["id"].is_number_integer() &&
                t.contains("content") && t["content"].is_string(),
            "added token ", t.dump(), " lacks an integer \"id\" or a string \"content\"");
      AddedToken tok;
      tok.id = t["id"].get<int64_t>();
      tok.content = t["content"].get<std::string>();
      check(tok.id >= 0 && tok.id < kMaxId, "added token '", tok.content, "' has id ", tok.id,
            ", not in [0, ", kMaxId, ")");
      check(!tok.content.empty(), "added token ", tok.id, " has empty content");
      tok.lstrip = flag(t, "lstrip", false);
      tok.rstrip = flag(t, "rstrip", false);
      model_.added.push_back(tok);
    }
  }

  void read_normalizer(const json& root) {
    if (!root.contains("normalizer") || root["normalizer"].is_null()) return;
    std::string type = type_of(root["normalizer"]);
    // NFC leaves NFC text unchanged, and training text is NFC in practice (see header).
    check(type == "NFC", "normalizer ", type, " is not supported (only none or NFC)");
  }

  void read_pre_tokenizer(const json& root) {
    check(root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null(),
          "has no pre_tokenizer, so it is not a byte-level BPE tokenizer");
    const json& pre = root["pre_tokenizer"];
    std::vector<json> steps;
    if (type_of(pre) == "Sequence") {
      check(pre.contains("pretokenizers") && pre["pretokenizers"].is_array(),
            "pre_tokenizer Sequence has no \"pretokenizers\" list");
      for (const json& step : pre["pretokenizers"]) steps.push_back(step);
    } else {
      steps.push_back(pre);
    }
    bool byte_level = false;
    for (size_t i = 0; i < steps.size(); ++i) {
      std::string type = type_of(steps[i]);
      if (type == "Split" && i == 0 && steps.size() == 2) {
        read_split(steps[i]);
      } else if (type == "ByteLevel" && i + 1 == steps.size()) {
        byte_level = true;
        bool use_regex = flag(steps[i], "use_regex", true);
        check(!(use_regex && model_.split), "a Split followed by ByteLevel with use_regex true ",
              "splits twice; that combination is not supported");
        if (use_regex) model_.split = SplitRule{SplitRule::Style::kGpt2, 0};
        model_.add_prefix_space = flag(steps[i], "add_prefix_space", true);
        check(!(model_.add_prefix_space && steps.size() > 1),
              "ByteLevel add_prefix_space after a Split is not supported");
      } else {
        check(false, "pre_tokenizer step ", type, " is not supported; expected ByteLevel, ",
              "optionally preceded by a Split with the Llama 3 or Qwen2 regex");
      }
    }
    check(byte_level, "pre_tokenizer has no ByteLevel step, so it is not byte-level BPE");
  }

  void read_split(const json& split) {
    const json& pattern = split.value("pattern", json());
    check(pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string(),
          "Split pre_tokenizer pattern ", pattern.dump(), " is not a {\"Regex\": ...}");
    std::string regex = pattern["Regex"].get<std::string>();
    model_.split = split_rule_for_regex(regex);
    check(model_.split.has_value(), "Split regex ", json(regex).dump(),
          " is not supported; supported: Llama 3 ",
          json(regex_of({SplitRule::Style::kGpt4, 3})).dump(), " and Qwen2/Qwen3 ",
          json(regex_of({SplitRule::Style::kGpt4, 1})).dump());
    std::string behavior = split.value("behavior", "Isolated");
    check(behavior == "Isolated" && !flag(split, "invert", false), "Split behavior '", behavior,
          "' (invert ", flag(split, "invert", false), ") is not supported; only Isolated is");
  }

  void build_id_table() {
    int64_t size = 0;
    for (const auto& [token, id] : model_.vocab) size = std::max(size, id + 1);
    for (const AddedToken& t : model_.added) size = std::max(size, t.id + 1);
    model_.id_to_token.assign(size, "");
    model_.id_is_added.assign(size, 0);
    for (const auto& [token, id] : model_.vocab) model_.id_to_token[id] = token;
    for (const AddedToken& t : model_.added) {
      model_.id_to_token[t.id] = t.content;
      model_.id_is_added[t.id] = 1;
    }
  }

  // Id of a token text as the user would write it (an added token's content, or a vocab entry).
  std::optional<int64_t> id_of(const std::string& text) const {
    for (const AddedToken& t : model_.added)
      if (t.content == text) return t.id;
    auto it = model_.vocab.find(text);
    if (it != model_.vocab.end()) return it->second;
    return std::nullopt;
  }

  void find_eos() {
    namespace fs = std::filesystem;
    fs::path config = fs::path(model_.path).parent_path() / "tokenizer_config.json";
    std::error_code ec;
    if (fs::is_regular_file(config, ec)) {
      json cfg = parse_json_file(config.string(), "tokenizer config");
      json eos = cfg.value("eos_token", json());
      if (eos.is_object()) eos = eos.value("content", json());
      if (eos.is_string()) {
        std::optional<int64_t> id = id_of(eos.get<std::string>());
        TITAN_CONFIG_CHECK(id.has_value(), "tokenizer config '", config.string(), "': eos_token '",
                           eos.get<std::string>(), "' is not a token of '", model_.path, "'");
        model_.eos_id = *id;
        return;
      }
    }
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"}) {
      if (std::optional<int64_t> id = id_of(name)) {
        model_.eos_id = *id;
        return;
      }
    }
    check(false, "no end-of-text token: none of <|endoftext|>, <|end_of_text|>, </s>, <eos> ",
          "is in it, and no tokenizer_config.json beside it names an eos_token");
  }

  BpeModel model_;
};

}  // namespace

BpeModel load_bpe_model(const std::string& path) { return Loader(path).load(); }

}  // namespace titan::bpe
