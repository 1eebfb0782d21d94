// llama2.c tokenizer.bin reading and the HF tokenizer.json (BPE + byte fallback) it becomes.
#include "io/llama2c_tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "io/json_file.h"

namespace unillm::io {
namespace {

using ojson = nlohmann::ordered_json;
const char* const kSpiece = "\xE2\x96\x81";  // U+2581 '▁'
const char* const kSpecial[3] = {"<unk>", "<s>", "</s>"};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IoError("[llama2c] " + path + ": " + what);
}

// Byte offsets where code points start (0 included); empty when s is not valid UTF-8.
bool utf8_starts(const std::string& s, std::vector<size_t>* starts) {
  starts->clear();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    starts->push_back(i);
    unsigned c = p[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
  return s;
}

ojson added_token(int id, const std::string& content) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", true}};
}

ojson replace_step(const std::string& from, const std::string& to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

ojson post_processor() {
  auto special = [](int type_id) { return ojson{{"SpecialToken", {{"id", "<s>"}, {"type_id", type_id}}}}; };
  auto seq = [](const char* id, int type_id) { return ojson{{"Sequence", {{"id", id}, {"type_id", type_id}}}}; };
  return {{"type", "TemplateProcessing"},
          {"single", {special(0), seq("A", 0)}},
          {"pair", {special(0), seq("A", 0), special(1), seq("B", 1)}},
          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
}

}  // namespace

Llama2cTokenizer read_llama2c_tokenizer(const std::string& path, int64_t expected_vocab) {
  const std::string bytes = read_file_bytes(path);
  const size_t n = bytes.size();
  auto read_i32 = [&](size_t at) { int32_t v; std::memcpy(&v, bytes.data() + at, 4); return v; };
  if (n < 4) fail(path, UNILLM_MSG("file is ", n, " bytes, shorter than the 4-byte max_token_length"));
  Llama2cTokenizer t;
  t.max_token_length = read_i32(0);
  if (t.max_token_length <= 0 || t.max_token_length > (1 << 16))
    fail(path, UNILLM_MSG("max_token_length ", t.max_token_length, " is out of range; not a llama2.c tokenizer?"));
  size_t pos = 4;
  while (expected_vocab < 0 ? pos < n : static_cast<int64_t>(t.pieces.size()) < expected_vocab) {
    const size_t id = t.pieces.size();
    if (pos + 8 > n)
      fail(path, UNILLM_MSG("file ends inside the record of token ", id,
                            expected_vocab >= 0 ? UNILLM_MSG(" (expected ", expected_vocab, " tokens, the checkpoint's vocab_size)") : ""));
    float score;
    std::memcpy(&score, bytes.data() + pos, 4);
    int32_t len = read_i32(pos + 4);
    pos += 8;
    if (len <= 0 || len > t.max_token_length)
      fail(path, UNILLM_MSG("token ", id, " has length ", len, " (expected 1..", t.max_token_length, ")"));
    if (pos + static_cast<size_t>(len) > n) fail(path, UNILLM_MSG("file ends inside the bytes of token ", id));
    t.pieces.emplace_back(bytes.data() + pos, static_cast<size_t>(len));
    t.scores.push_back(score);
    pos += static_cast<size_t>(len);
  }
  if (pos != n)
    fail(path, UNILLM_MSG(n - pos, " bytes remain after ", t.pieces.size(),
                          " tokens; the tokenizer does not match the checkpoint's vocab_size ", expected_vocab));
  if (t.pieces.size() < 3) fail(path, UNILLM_MSG("has ", t.pieces.size(), " tokens; expected <unk>, <s>, </s> first"));
  return t;
}

std::vector<std::string> llama2c_hf_pieces(const Llama2cTokenizer& t, const std::string& path) {
  std::vector<std::string> out;
  std::unordered_map<std::string, size_t> seen;
  std::vector<size_t> starts;
  for (size_t id = 0; id < t.pieces.size(); ++id) {
    std::string p = id < 3 ? std::string(kSpecial[id]) : replace_all(t.pieces[id], " ", kSpiece);
    if (!utf8_starts(p, &starts)) fail(path, UNILLM_MSG("token ", id, " is not valid UTF-8"));
    auto [it, fresh] = seen.emplace(p, id);
    if (!fresh) fail(path, UNILLM_MSG("tokens ", it->second, " and ", id, " are both '", p, "'"));
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> sentencepiece_bpe_merges(
    const std::vector<std::string>& pieces, const std::vector<float>& scores) {
  std::unordered_map<std::string, int64_t> vocab;
  for (size_t i = 0; i < pieces.size(); ++i) vocab.emplace(pieces[i], static_cast<int64_t>(i));
  struct Merge {
    int64_t l, r;
    float score;
    size_t chars_l, chars_r;
  };
  std::vector<Merge> merges;
  std::vector<size_t> starts;
  for (size_t id = 0; id < pieces.size(); ++id) {
    const std::string& p = pieces[id];
    if (!utf8_starts(p, &starts)) continue;  // llama2c_hf_pieces rejects these earlier
    std::vector<Merge> local;
    for (size_t k = 1; k < starts.size(); ++k) {
      auto l = vocab.find(p.substr(0, starts[k]));
      auto r = vocab.find(p.substr(starts[k]));
      if (l != vocab.end() && r != vocab.end())
        local.push_back({l->second, r->second, scores[id], k, starts.size() - k});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.l != b.l ? a.l < b.l : a.r < b.r;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  // Python's sorted(..., reverse=True) is stable: equal keys keep their order.
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.chars_l != b.chars_l) return a.chars_l > b.chars_l;
    return a.chars_r > b.chars_r;
  });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const auto& m : merges) out.emplace_back(pieces[m.l], pieces[m.r]);
  return out;
}

ojson llama2c_tokenizer_json(const Llama2cTokenizer& t, const std::string& path) {
  std::vector<std::string> pieces = llama2c_hf_pieces(t, path);
  std::vector<float> scores = t.scores;
  for (int i = 0; i < 3; ++i) scores[i] = 0.0f;
  ojson vocab = ojson::object();
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = i;
  ojson merges = ojson::array();
  for (const auto& [l, r] : sentencepiece_bpe_merges(pieces, scores)) merges.push_back(l + " " + r);
  ojson model = {{"type", "BPE"},          {"dropout", nullptr},
                 {"unk_token", "<unk>"},   {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", true},
                 {"byte_fallback", true},  {"vocab", std::move(vocab)},
                 {"merges", std::move(merges)}};
  ojson j = ojson::object();
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = {added_token(0, "<unk>"), added_token(1, "<s>"), added_token(2, "</s>")};
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "Prepend"}, {"prepend", kSpiece}}, replace_step(" ", kSpiece)}}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = post_processor();
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", {replace_step(kSpiece, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  j["model"] = std::move(model);
  return j;
}

ojson llama_tokenizer_config_json(int64_t model_max_length) {
  ojson decoder = ojson::object();
  for (int i = 0; i < 3; ++i) {
    ojson tok = added_token(i, kSpecial[i]);
    tok.erase("id");
    decoder[std::to_string(i)] = tok;
  }
  return {{"add_bos_token", true},
          {"add_eos_token", false},
          {"added_tokens_decoder", decoder},
          {"bos_token", "<s>"},
          {"clean_up_tokenization_spaces", false},
          {"eos_token", "</s>"},
          {"legacy", true},
          {"model_max_length", model_max_length},
          {"pad_token", nullptr},
          {"padding_side", "right"},
          {"sp_model_kwargs", ojson::object()},
          {"tokenizer_class", "LlamaTokenizer"},
          {"unk_token", "<unk>"}};
}

}  // namespace unillm::io
