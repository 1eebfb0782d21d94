// Tokens added after load (LLaMA-Factory's add_tokens / add_special_tokens / template stop words)
// and writing them back into the Hugging Face tokenizer files, so transformers loads the saved
// tokenizer with the same ids.
#include <filesystem>

#include "io/json_file.h"
#include "io/tokenizer.h"
#include "io/tokenizer_internal.h"

namespace unillm::io {

namespace fs = std::filesystem;

namespace {

// HF AddedToken fields as transformers writes them.
template <class Json>
Json added_token_json(const tok::TokenizerData& d, int32_t id) {
  Json t;
  t["content"] = d.tokens[id];
  t["single_word"] = false;
  t["lstrip"] = false;
  t["rstrip"] = false;
  // false for non-special tokens too (HF's default is !special): unillm matches added tokens in
  // the raw text, and so does transformers for normalized=false, so both read the saved tokenizer
  // alike (a normalized token would be matched after the normalizer, e.g. as "▁[NEW]").
  t["normalized"] = false;
  t["special"] = static_cast<bool>(d.special[id]);
  return t;
}

void mark_loaded_size(tok::TokenizerData& d) {
  if (d.loaded_size == 0) d.loaded_size = static_cast<int32_t>(d.tokens.size());
}

// The added special tokens that are not the EOS: HF's additional_special_tokens.
std::vector<std::string> additional_special(const tok::TokenizerData& d) {
  std::vector<std::string> out;
  for (int32_t id = d.loaded_size; id < static_cast<int32_t>(d.tokens.size()); ++id)
    if (d.special[id] && id != d.eos) out.push_back(d.tokens[id]);
  return out;
}

void append_unique(nlohmann::ordered_json& list, const std::vector<std::string>& tokens) {
  if (!list.is_array()) list = nlohmann::ordered_json::array();
  for (const auto& t : tokens) {
    bool seen = false;
    for (const auto& v : list)
      seen = seen || (v.is_string() && v.get<std::string>() == t) ||
             (v.is_object() && v.value("content", "") == t);
    if (!seen) list.push_back(t);
  }
}

void patch_tokenizer_json(const tok::TokenizerData& d, const std::string& src,
                          const std::string& dst) {
  nlohmann::ordered_json j = read_ordered_json_file(src);
  auto& added = j["added_tokens"];
  if (!added.is_array()) added = nlohmann::ordered_json::array();
  for (int32_t id = d.loaded_size; id < static_cast<int32_t>(d.tokens.size()); ++id) {
    nlohmann::ordered_json t;
    t["id"] = id;
    t.update(added_token_json<nlohmann::ordered_json>(d, id));
    added.push_back(t);
  }
  write_file_atomic(dst, j.dump(2) + "\n");
}

void patch_tokenizer_config(const tok::TokenizerData& d, const std::string& src,
                            const std::string& dst) {
  nlohmann::ordered_json j =
      fs::exists(src) ? read_ordered_json_file(src) : nlohmann::ordered_json::object();
  auto& dec = j["added_tokens_decoder"];
  if (!dec.is_object()) dec = nlohmann::ordered_json::object();
  for (int32_t id = d.loaded_size; id < static_cast<int32_t>(d.tokens.size()); ++id)
    dec[std::to_string(id)] = added_token_json<nlohmann::ordered_json>(d, id);
  const auto extra = additional_special(d);
  if (!extra.empty()) append_unique(j["additional_special_tokens"], extra);
  if (d.eos_changed) j["eos_token"] = d.tokens[d.eos];
  if (d.split_special_changed) j["split_special_tokens"] = d.split_special;
  write_file_atomic(dst, j.dump(2) + "\n");
}

void patch_special_tokens_map(const tok::TokenizerData& d, const std::string& src,
                              const std::string& dst) {
  nlohmann::ordered_json j = read_ordered_json_file(src);
  const auto extra = additional_special(d);
  if (!extra.empty()) append_unique(j["additional_special_tokens"], extra);
  if (d.eos_changed) j["eos_token"] = d.tokens[d.eos];
  write_file_atomic(dst, j.dump(2) + "\n");
}

}  // namespace

int Tokenizer::add_tokens(const std::vector<std::string>& tokens, bool special) {
  mark_loaded_size(*d_);
  int added = 0;
  for (const std::string& t : tokens) {
    if (t.empty()) UNILLM_THROW(ConfigError, "[tokenizer] cannot add an empty token");
    if (d_->token_ids.count(t)) continue;  // HF keeps the existing id
    tok::AddedToken a;
    a.content = t;
    a.id = static_cast<int32_t>(d_->tokens.size());
    a.special = special;
    d_->add_token(a);
    ++added;
  }
  if (added > 0) d_->finalize();  // rebuilds the added-token matcher
  return added;
}

bool Tokenizer::set_eos_token(const std::string& token) {
  const bool added = add_tokens({token}, true) > 0;
  const int32_t id = d_->token_ids.find(token)->second;
  if (id != d_->eos) {
    d_->eos = id;
    d_->eos_changed = true;
    d_->finalize();  // stop ids gain the new EOS
  }
  return added;
}

void Tokenizer::set_split_special_tokens(bool on) {
  if (on == d_->split_special) return;
  d_->split_special = on;
  d_->split_special_changed = true;
}

bool Tokenizer::split_special_tokens() const { return d_->split_special; }

bool Tokenizer::modified_since_load() const {
  return !added_since_load().empty() || d_->eos_changed || d_->split_special_changed;
}

std::vector<int32_t> Tokenizer::added_since_load() const {
  std::vector<int32_t> ids;
  if (d_->loaded_size == 0) return ids;
  for (int32_t id = d_->loaded_size; id < vocab_size(); ++id) ids.push_back(id);
  return ids;
}

void Tokenizer::save_files(const std::string& src_dir, const std::string& dst_dir) const {
  static const char* const kCopied[] = {"tokenizer.model", "added_tokens.json", "vocab.json",
                                        "merges.txt"};
  fs::create_directories(dst_dir);
  for (const char* f : kCopied) {
    const fs::path src = fs::path(src_dir) / f;
    if (fs::exists(src))
      write_file_atomic((fs::path(dst_dir) / f).string(), read_file_bytes(src.string()));
  }
  auto in = [&](const char* f) { return (fs::path(src_dir) / f).string(); };
  auto out = [&](const char* f) { return (fs::path(dst_dir) / f).string(); };
  if (fs::exists(in("tokenizer.json")))
    patch_tokenizer_json(*d_, in("tokenizer.json"), out("tokenizer.json"));
  patch_tokenizer_config(*d_, in("tokenizer_config.json"), out("tokenizer_config.json"));
  if (fs::exists(in("special_tokens_map.json")))
    patch_special_tokens_map(*d_, in("special_tokens_map.json"), out("special_tokens_map.json"));
}

}  // namespace unillm::io
