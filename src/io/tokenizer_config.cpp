// The Hugging Face side files every tokenizer format may come with: tokenizer_config.json (added
// tokens, bos/eos, add_bos_token), added_tokens.json, special_tokens_map.json and
// generation_config.json (extra end-of-generation ids); plus the small file/JSON helpers.
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "io/tokenizer_internal.h"

namespace unillm::io::tok {

void fail(const std::string& source, const std::string& what) {
  UNILLM_THROW(IoError, "[tokenizer] ", source, ": ", what);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail(path, "read error");
  return ss.str();
}

int32_t json_id(const nlohmann::json& v, const std::string& source, const std::string& what) {
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= INT32_MAX
                    : v.is_number_integer()
                        ? v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX
                        : false;
  if (!fits)
    fail(source, what + " must be an integer id, got " +
                     (v.is_number() ? v.dump() : std::string(v.type_name())));
  return static_cast<int32_t>(v.get<int64_t>());
}

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(source, std::string("bad JSON: ") + e.what());
  }
}

namespace {

// A token named in a config: a string, {"content": ...}, or null (returns "").
std::string token_name(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return {};
}

int32_t find_token(const TokenizerData& d, const std::string& name, const std::string& src,
                   const char* key) {
  auto it = d.token_ids.find(name);
  if (it == d.token_ids.end())
    fail(src, std::string(key) + " '" + name + "' is not in the vocabulary");
  return it->second;
}

// Marks an existing token special (and matchable with parse_special).
void mark_special(TokenizerData& d, const std::string& name) {
  auto it = d.token_ids.find(name);
  if (it == d.token_ids.end() || name.empty()) return;
  AddedToken t{name, it->second, true, false, false};
  for (const AddedToken& a : d.added)
    if (a.content == name) t = a, t.special = true;
  std::string piece = d.pieces[t.id];
  d.add_token(t);
  d.pieces[t.id] = piece;  // keep how the model decodes it
}

void apply_tokenizer_config(const nlohmann::json& c, const std::string& src, TokenizerData& d) {
  if (c.contains("added_tokens_decoder")) {
    for (const auto& [key, v] : c.at("added_tokens_decoder").items()) {
      AddedToken t;
      t.id = std::stoi(key);
      t.content = v.at("content").get<std::string>();
      t.special = v.value("special", false);
      t.lstrip = v.value("lstrip", false);
      t.rstrip = v.value("rstrip", false);
      d.add_token(t);
    }
  }
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!c.contains(key)) continue;
    std::string name = token_name(c.at(key));
    if (key == std::string("bos_token")) d.bos = name.empty() ? -1 : find_token(d, name, src, key);
    if (key == std::string("eos_token")) d.eos = name.empty() ? -1 : find_token(d, name, src, key);
    mark_special(d, name);
  }
  if (c.contains("additional_special_tokens"))
    for (const auto& v : c.at("additional_special_tokens")) mark_special(d, token_name(v));
  if (c.contains("add_bos_token") && c.at("add_bos_token").is_boolean()) {
    d.prefix.clear();
    if (c.at("add_bos_token").get<bool>() && d.bos >= 0) d.prefix.push_back(d.bos);
  }
  if (c.contains("split_special_tokens") && c.at("split_special_tokens").is_boolean())
    d.split_special = c.at("split_special_tokens").get<bool>();
  if (c.contains("add_eos_token") && c.at("add_eos_token").is_boolean()) {
    d.suffix.clear();
    if (c.at("add_eos_token").get<bool>() && d.eos >= 0) d.suffix.push_back(d.eos);
  }
}

void apply_special_tokens_map(const nlohmann::json& m, const std::string& src, TokenizerData& d,
                              bool have_config) {
  for (const auto& [key, v] : m.items()) {
    if (key == "additional_special_tokens") {
      for (const auto& t : v) mark_special(d, token_name(t));
      continue;
    }
    std::string name = token_name(v);
    mark_special(d, name);
    if (have_config || name.empty()) continue;  // tokenizer_config.json has the last word
    if (key == "bos_token") d.bos = find_token(d, name, src, "bos_token");
    if (key == "eos_token") d.eos = find_token(d, name, src, "eos_token");
  }
}

void apply_generation_config(const nlohmann::json& g, const std::string& src, TokenizerData& d) {
  if (g.contains("eos_token_id")) {
    const auto& e = g.at("eos_token_id");
    std::vector<int32_t> ids;
    if (e.is_number_integer()) ids.push_back(json_id(e, src, "eos_token_id"));
    if (e.is_array())
      for (const auto& x : e) ids.push_back(json_id(x, src, "eos_token_id"));
    for (int32_t id : ids)
      if (id >= 0 && id < static_cast<int32_t>(d.tokens.size())) d.stop_ids.push_back(id);
    if (d.eos < 0 && !d.stop_ids.empty()) d.eos = d.stop_ids.front();
  }
  if (d.bos < 0 && g.contains("bos_token_id") && g.at("bos_token_id").is_number_integer())
    d.bos = json_id(g.at("bos_token_id"), src, "bos_token_id");
}

}  // namespace

void apply_hf_configs(const std::string& dir, TokenizerData& d) {
  std::string src;
  try {
    src = dir + "/tokenizer_config.json";
    bool have_config = file_exists(src);
    if (have_config) apply_tokenizer_config(parse_json(read_file(src), src), src, d);
    src = dir + "/added_tokens.json";
    if (file_exists(src)) {
      nlohmann::json added = parse_json(read_file(src), src);
      for (const auto& [content, id] : added.items())
        if (!d.token_ids.count(content))
          d.add_token({content, json_id(id, src, "the id of '" + content + "'"), false, false,
                       false});
    }
    src = dir + "/special_tokens_map.json";
    if (file_exists(src))
      apply_special_tokens_map(parse_json(read_file(src), src), src, d, have_config);
    src = dir + "/generation_config.json";
    if (file_exists(src)) apply_generation_config(parse_json(read_file(src), src), src, d);
  } catch (const nlohmann::json::exception& e) {
    fail(src, std::string("unexpected JSON layout: ") + e.what());
  } catch (const std::logic_error& e) {  // std::stoi on a bad added_tokens_decoder key
    fail(src, std::string("bad value: ") + e.what());
  }
}

}  // namespace unillm::io::tok
