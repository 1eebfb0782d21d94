// A loaded Tokenizer -> GGUF tokenizer keys (llama.cpp's "llama" and "gpt2" vocabularies).
#include <algorithm>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "io/gguf_vocab.h"
#include "io/json_file.h"
#include "io/tokenizer_internal.h"

namespace unillm::io {

namespace {

namespace fs = std::filesystem;
using tok::BpeModel;
using tok::TokenizerData;

enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

// The merges in rank order as (left id, right id, result id).
struct Merge {
  int32_t rank, left, right, id;
};
std::vector<Merge> ranked_merges(const BpeModel& m) {
  std::vector<Merge> out;
  for (const auto& [key, v] : m.merges)
    out.push_back(
        {v.rank, static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xffffffffu), v.id});
  std::sort(out.begin(), out.end(), [](const Merge& a, const Merge& b) { return a.rank < b.rank; });
  return out;
}

// SentencePiece scores. A tokenizer.model has them; a tokenizer.json holds merges instead, and
// greedy merging by score (llama.cpp's SPM tokenizer) follows the merges when a token's score is
// minus the rank of the first merge that makes it. Other normal tokens score below all of those;
// special and byte tokens 0, as in SentencePiece models (and HF's LlamaConverter).
std::vector<double> spm_scores(const TokenizerData& d, const std::vector<int64_t>& types) {
  const auto n = static_cast<int64_t>(types.size());
  const BpeModel& m = d.pipeline.model;
  std::vector<double> scores(static_cast<size_t>(n), 0.0);
  if (m.mode == BpeModel::Mode::kCharScores) {
    for (size_t id = 0; id < m.scores.size() && id < scores.size(); ++id) scores[id] = m.scores[id];
    return scores;
  }
  const std::vector<Merge> merges = ranked_merges(m);
  std::vector<int64_t> first(static_cast<size_t>(n), -1);
  for (const Merge& mg : merges)
    if (mg.id >= 0 && mg.id < n && first[mg.id] < 0) first[mg.id] = mg.rank;
  const auto n_merges = static_cast<double>(merges.size());
  for (int64_t id = 0; id < n; ++id)
    if (types[id] == kNormal || types[id] == kUnused)
      scores[id] =
          first[id] >= 0 ? -static_cast<double>(first[id]) : -(n_merges + static_cast<double>(id));
  return scores;
}

// tokenizer.ggml.pre: what llama.cpp's converter names this pre-tokenizer. Read from the
// tokenizer.json's Split regex when there is one; else (vocab.json + merges.txt) by model_type.
std::string pre_tokenizer_name(const GgufVocabOptions& o, std::vector<std::string>* notes) {
  const fs::path tj = fs::path(o.tokenizer_dir) / "tokenizer.json";
  if (!o.tokenizer_dir.empty() && fs::exists(tj)) {
    const nlohmann::json j = read_json_file(tj.string());
    const std::string pre = j.contains("pre_tokenizer") ? j.at("pre_tokenizer").dump() : "null";
    auto has = [&](const char* pattern) {
      return pre.find(nlohmann::json(pattern).dump()) != std::string::npos;
    };
    if (has(tok::kQwen2Pattern)) return "qwen2";
    if (has(tok::kLlama3Pattern)) return "llama-bpe";
    if (pre.find("\"Split\"") == std::string::npos) return "gpt-2";  // ByteLevel's own regex
    if (notes)
      notes->push_back(
          "tokenizer.json has a pre-tokenizer llama.cpp may not know; tokenizer.ggml.pre = "
          "default");
    return "default";
  }
  if (o.model_type == "qwen2" || o.model_type == "qwen3" || o.model_type == "qwen2_moe" || o.model_type == "qwen3_moe")
    return "qwen2";
  return "gpt-2";
}

int64_t token_type(const TokenizerData& d, const std::vector<uint8_t>& added_plain,
                   const std::vector<uint8_t>& bytes, int32_t id) {
  if (d.tokens[id].empty()) return kUnused;
  if (id == d.pipeline.model.unk_id) return kUnknown;
  if (d.special[id]) return kControl;
  if (added_plain[id]) return kUserDefined;
  if (bytes[id]) return kByte;
  return kNormal;
}

// chat_template and pad_token of tokenizer_config.json, when present.
void read_tokenizer_config(const std::string& dir, std::string* chat_template,
                           std::string* pad_token) {
  const fs::path p = fs::path(dir) / "tokenizer_config.json";
  if (dir.empty() || !fs::exists(p)) return;
  const nlohmann::json c = read_json_file(p.string());
  if (!c.is_object()) return;
  if (c.contains("chat_template")) {
    const auto& t = c.at("chat_template");
    if (t.is_string()) *chat_template = t.get<std::string>();
    if (t.is_array())  // [{"name": "default", "template": ...}, ...]
      for (const auto& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template"))
          *chat_template = e.at("template").get<std::string>();
  }
  if (c.contains("pad_token")) {
    const auto& t = c.at("pad_token");
    if (t.is_string()) *pad_token = t.get<std::string>();
    if (t.is_object() && t.contains("content")) *pad_token = t.at("content").get<std::string>();
  }
}

bool adds_space_prefix(const TokenizerData& d) {
  for (const auto& n : d.pipeline.normalizers)
    if (n.kind == tok::Normalizer::Kind::kPrepend) return true;
  for (const auto& p : d.pipeline.pretokenizers)
    if (p.kind == tok::PreTokenizer::Kind::kMetaspace &&
        p.prepend != tok::PreTokenizer::Prepend::kNever)
      return true;
  return false;
}

}  // namespace

void add_gguf_vocab(const Tokenizer& tokenizer, const GgufVocabOptions& o, GgufMetadata& md,
                    std::vector<std::string>* notes) {
  const TokenizerData& d = tokenizer.data();
  const BpeModel& m = d.pipeline.model;
  const auto n_tok = static_cast<int64_t>(d.tokens.size());
  if (m.mode == BpeModel::Mode::kByteRanks)
    UNILLM_THROW(ConfigError, "[gguf] ", d.source,
                 ": a tiktoken tokenizer has no merges to write; "
                 "save the tokenizer as tokenizer.json (transformers) and export again");
  if (o.vocab_size > 0 && n_tok > o.vocab_size)
    UNILLM_THROW(ConfigError, "[gguf] ", d.source, ": the tokenizer has ", n_tok,
                 " tokens but the model only ", o.vocab_size, " embedding rows");
  const int64_t n = std::max(n_tok, o.vocab_size);
  const bool spm = m.mode == BpeModel::Mode::kCharMerges || m.mode == BpeModel::Mode::kCharScores;
  std::vector<uint8_t> added_plain(static_cast<size_t>(n_tok), 0),
      bytes(static_cast<size_t>(n_tok), 0);
  for (const auto& a : d.added)
    if (!a.special && a.id >= 0 && a.id < n_tok) added_plain[a.id] = 1;
  if (spm)
    for (int32_t id : m.byte_ids)
      if (id >= 0 && id < n_tok) bytes[id] = 1;
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int64_t> types(static_cast<size_t>(n), kUnused);
  for (int64_t id = 0; id < n; ++id) {
    const bool real = id < n_tok && !d.tokens[id].empty();
    tokens[id] = real ? d.tokens[id] : "[PAD" + std::to_string(id) + "]";
    if (real) types[id] = token_type(d, added_plain, bytes, static_cast<int32_t>(id));
  }
  md.emplace_back("tokenizer.ggml.model", GgufValue::string(spm ? "llama" : "gpt2"));
  if (!spm) md.emplace_back("tokenizer.ggml.pre", GgufValue::string(pre_tokenizer_name(o, notes)));
  md.emplace_back("tokenizer.ggml.tokens", GgufValue::strings_array(tokens));
  if (spm) md.emplace_back("tokenizer.ggml.scores", GgufValue::f32_array(spm_scores(d, types)));
  md.emplace_back("tokenizer.ggml.token_type", GgufValue::i32_array(types));
  if (!spm) {
    std::vector<std::string> merges;
    for (const Merge& mg : ranked_merges(m))
      merges.push_back(d.tokens[mg.left] + " " + d.tokens[mg.right]);
    md.emplace_back("tokenizer.ggml.merges", GgufValue::strings_array(std::move(merges)));
  }
  std::string chat_template, pad_token;
  read_tokenizer_config(o.tokenizer_dir, &chat_template, &pad_token);
  int32_t pad = o.pad_id;
  if (pad < 0 && !pad_token.empty()) pad = tokenizer.token_to_id(pad_token).value_or(-1);
  auto id_key = [&](const char* key, int32_t id) {
    if (id >= 0) md.emplace_back(key, GgufValue::u32(static_cast<uint32_t>(id)));
  };
  auto in_vocab = [&](int32_t id) { return id >= 0 && id < n ? id : -1; };
  id_key("tokenizer.ggml.bos_token_id", d.bos >= 0 ? d.bos : in_vocab(o.config_bos_id));
  id_key("tokenizer.ggml.eos_token_id", d.eos >= 0 ? d.eos : in_vocab(o.config_eos_id));
  id_key("tokenizer.ggml.unknown_token_id", m.unk_id);
  id_key("tokenizer.ggml.padding_token_id", pad);
  const bool add_bos = !d.prefix.empty() && d.prefix.front() == d.bos && d.bos >= 0;
  const bool add_eos = !d.suffix.empty() && d.suffix.back() == d.eos && d.eos >= 0;
  md.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(add_bos));
  md.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::boolean(add_eos));
  if (spm)
    md.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::boolean(adds_space_prefix(d)));
  if (!chat_template.empty())
    md.emplace_back("tokenizer.chat_template", GgufValue::string(chat_template));
}

}  // namespace unillm::io
