// GGUF tokenizer keys -> Hugging Face tokenizer.json + tokenizer_config.json that unillm's (and
// transformers') loaders read back with the same ids.
#include <string_view>
#include <unordered_set>

#include "core/error.h"
#include "io/gguf_vocab.h"
#include "io/llama2c_tokenizer.h"  // sentencepiece_bpe_merges
#include "io/tokenizer_internal.h"

namespace unillm::io {

namespace {

using ojson = nlohmann::ordered_json;
const char* const kSpiece = "\xE2\x96\x81";  // U+2581, SentencePiece's space

enum TokenType : int64_t { kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5 };

[[noreturn]] void fail(const GgufFile& f, const std::string& what) {
  throw IoError("[gguf] " + f.path() + ": " + what);
}

struct Vocab {
  std::string model;  // "llama" or "gpt2"
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  std::vector<double> scores;
  std::vector<std::string> merges;
  int64_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = true;
  std::string pre, chat_template;
};

Vocab read_vocab(const GgufFile& f) {
  Vocab v;
  v.model = f.get_string("tokenizer.ggml.model");
  if (v.model != "llama" && v.model != "gpt2")
    fail(f, "tokenizer.ggml.model '" + v.model + "' is not supported (llama, gpt2 are)");
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufType::kArray || tokens->elem != GgufType::kString)
    fail(f, "tokenizer.ggml.tokens is missing or not an array of strings");
  v.tokens = tokens->strings;
  const size_t n = v.tokens.size();
  const GgufValue* types = f.find("tokenizer.ggml.token_type");
  v.types.assign(n, 1);
  if (types) {
    if (types->type != GgufType::kArray || types->ints.size() != n)
      fail(f, "tokenizer.ggml.token_type does not have one integer per token");
    v.types = types->ints;
  }
  const GgufValue* scores = f.find("tokenizer.ggml.scores");
  v.scores.assign(n, 0.0);
  if (scores) {
    if (scores->type != GgufType::kArray || scores->floats.size() != n)
      fail(f, "tokenizer.ggml.scores does not have one float per token");
    v.scores = scores->floats;
  }
  if (const GgufValue* merges = f.find("tokenizer.ggml.merges")) {
    if (merges->type != GgufType::kArray || merges->elem != GgufType::kString)
      fail(f, "tokenizer.ggml.merges is not an array of strings");
    v.merges = merges->strings;
  } else if (v.model == "gpt2") {
    fail(f, "tokenizer.ggml.merges is missing (a gpt2 vocabulary needs its merges)");
  }
  auto id = [&](const char* key) {
    const int64_t x = f.get_int_or(key, -1);
    if (x >= static_cast<int64_t>(n))
      fail(f, UNILLM_MSG(key, " ", x, " is outside the ", n, " tokens"));
    return x;
  };
  v.bos = id("tokenizer.ggml.bos_token_id");
  v.eos = id("tokenizer.ggml.eos_token_id");
  v.unk = id("tokenizer.ggml.unknown_token_id");
  v.pad = id("tokenizer.ggml.padding_token_id");
  // llama.cpp's defaults when the keys are absent: SentencePiece adds BOS and a space prefix.
  v.add_bos = f.get_int_or("tokenizer.ggml.add_bos_token", v.model == "llama") != 0;
  v.add_eos = f.get_int_or("tokenizer.ggml.add_eos_token", 0) != 0;
  v.add_space_prefix = f.get_int_or("tokenizer.ggml.add_space_prefix", v.model == "llama") != 0;
  if (f.find("tokenizer.ggml.pre")) v.pre = f.get_string("tokenizer.ggml.pre");
  if (f.find("tokenizer.chat_template")) v.chat_template = f.get_string("tokenizer.chat_template");
  return v;
}

// llama.cpp's converter pads the token list to the embedding rows with "[PADn]" (unused): those
// are holes in the HF vocabulary, not tokens.
bool is_padding(const Vocab& v, size_t id) {
  return v.types[id] == kUnused && v.tokens[id] == "[PAD" + std::to_string(id) + "]";
}

ojson added_tokens(const Vocab& v) {
  ojson out = ojson::array();
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const int64_t t = v.types[id];
    if (t != kUnknown && t != kControl && t != kUserDefined) continue;
    out.push_back({{"id", id},
                   {"content", v.tokens[id]},
                   {"single_word", false},
                   {"lstrip", false},
                   {"rstrip", false},
                   {"normalized", false},
                   {"special", t != kUserDefined}});
  }
  return out;
}

ojson replace_step(const std::string& from, const std::string& to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

// BOS/EOS around a single sequence, as the tokenizer adds them.
ojson post_processor(const Vocab& v) {
  const bool bos = v.add_bos && v.bos >= 0, eos = v.add_eos && v.eos >= 0;
  if (!bos && !eos) return nullptr;
  ojson single = ojson::array(), specials = ojson::object();
  auto special = [&](int64_t id) {
    const std::string& name = v.tokens[static_cast<size_t>(id)];
    specials[name] = {{"id", name}, {"ids", {id}}, {"tokens", {name}}};
    return ojson{{"SpecialToken", {{"id", name}, {"type_id", 0}}}};
  };
  if (bos) single.push_back(special(v.bos));
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (eos) single.push_back(special(v.eos));
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", single},
          {"special_tokens", specials}};
}

// {token: id} in id order. Appended to ordered_json's underlying vector directly: its operator[]
// searches linearly, quadratic over a 150k vocabulary. A repeated token string (some GGUFs
// have them) keeps its first id; the later ones become holes.
ojson vocab_object(const Vocab& v) {
  ojson vocab = ojson::object();
  auto& entries = vocab.get_ref<ojson::object_t&>();
  entries.reserve(v.tokens.size());
  std::unordered_set<std::string_view> seen;
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (!is_padding(v, id) && seen.insert(v.tokens[id]).second)
      entries.emplace_back(v.tokens[id], id);
  return vocab;
}

ojson bpe_model(const Vocab& v, ojson merges, bool spm, bool ignore_merges) {
  ojson m = {
      {"type", "BPE"},
      {"dropout", nullptr},
      {"unk_token", v.unk >= 0 ? ojson(v.tokens[static_cast<size_t>(v.unk)]) : ojson(nullptr)},
      {"continuing_subword_prefix", nullptr},
      {"end_of_word_suffix", nullptr},
      {"fuse_unk", spm},
      {"byte_fallback", spm}};
  if (ignore_merges) m["ignore_merges"] = true;
  m["vocab"] = vocab_object(v);
  m["merges"] = std::move(merges);
  return m;
}

// SentencePiece style, as transformers' LlamaConverter writes it.
ojson spm_tokenizer_json(const Vocab& v) {
  ojson merges = ojson::array();
  std::vector<float> scores(v.scores.begin(), v.scores.end());
  for (const auto& [l, r] : sentencepiece_bpe_merges(v.tokens, scores))
    merges.push_back(l + " " + r);
  ojson norms = ojson::array();
  if (v.add_space_prefix) norms.push_back({{"type", "Prepend"}, {"prepend", kSpiece}});
  norms.push_back(replace_step(" ", kSpiece));
  ojson decoders = {replace_step(kSpiece, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}};
  if (v.add_space_prefix)
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  ojson j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  j["added_tokens"] = added_tokens(v);
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", norms}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = post_processor(v);
  j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  j["model"] = bpe_model(v, std::move(merges), true, false);
  return j;
}

// Byte-level BPE; the pre-tokenizer regex is the one tokenizer.ggml.pre names.
ojson gpt2_tokenizer_json(const GgufFile& f, const Vocab& v) {
  const char* pattern = nullptr;
  if (v.pre == "qwen2")
    pattern = tok::kQwen2Pattern;
  else if (v.pre == "llama-bpe" || v.pre == "llama3")
    pattern = tok::kLlama3Pattern;
  else if (!v.pre.empty() && v.pre != "gpt-2" && v.pre != "gpt2" && v.pre != "default")
    fail(f, "tokenizer.ggml.pre '" + v.pre +
                "' is not supported (qwen2, llama-bpe, gpt-2, default are)");
  ojson byte_level = {{"type", "ByteLevel"},
                      {"add_prefix_space", false},
                      {"trim_offsets", pattern == nullptr},
                      {"use_regex", pattern == nullptr}};
  ojson j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  j["added_tokens"] = added_tokens(v);
  j["normalizer"] = v.pre == "qwen2" ? ojson{{"type", "NFC"}} : ojson(nullptr);
  if (pattern)
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"},
                             {"pattern", {{"Regex", pattern}}},
                             {"behavior", "Isolated"},
                             {"invert", false}},
                            byte_level}}};
  else
    j["pre_tokenizer"] = byte_level;
  j["post_processor"] = post_processor(v);
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  j["model"] = bpe_model(v, ojson(v.merges), false, pattern == tok::kLlama3Pattern);
  return j;
}

ojson tokenizer_config(const Vocab& v, int64_t model_max_length) {
  auto name = [&](int64_t id) {
    return id >= 0 ? ojson(v.tokens[static_cast<size_t>(id)]) : ojson(nullptr);
  };
  ojson c = {
      {"add_bos_token", v.add_bos},
      {"add_eos_token", v.add_eos},
      {"bos_token", name(v.bos)},
      {"eos_token", name(v.eos)},
      {"unk_token", name(v.unk)},
      {"pad_token", name(v.pad)},
      {"clean_up_tokenization_spaces", false},
      {"model_max_length", model_max_length},
      {"tokenizer_class", v.model == "llama" ? "LlamaTokenizer" : "PreTrainedTokenizerFast"}};
  if (v.model == "llama") c["legacy"] = true;
  if (!v.chat_template.empty()) c["chat_template"] = v.chat_template;
  return c;
}

}  // namespace

HfTokenizerFiles hf_tokenizer_from_gguf(const GgufFile& f, int64_t model_max_length) {
  const Vocab v = read_vocab(f);
  const ojson tj = v.model == "llama" ? spm_tokenizer_json(v) : gpt2_tokenizer_json(f, v);
  return {tj.dump(2) + "\n", tokenizer_config(v, model_max_length).dump(2) + "\n"};
}

}  // namespace unillm::io
