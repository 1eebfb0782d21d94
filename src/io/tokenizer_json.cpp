// HF tokenizer.json with a BPE model: byte-level (GPT-2, Llama 3, Qwen2: ByteLevel / Split
// pre-tokenizers, NFC) or SentencePiece style (Llama 2 as convert_slow_tokenizer writes it:
// Prepend + Replace normalizers or Metaspace, byte_fallback, Replace/ByteFallback/Fuse/Strip
// decoder). Unsupported components fail with an IoError naming them, never silently.
#include "io/tokenizer_internal.h"
#include "io/tokenizer_unicode.h"

namespace unillm::io::tok {
namespace {

using json = nlohmann::json;

const json& require(const json& j, const char* key, const std::string& where,
                    const std::string& src) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null())
    fail(src, where + key + " missing");
  return j.at(key);
}

std::string type_of(const json& j, const std::string& where, const std::string& src) {
  return require(j, "type", where, src).get<std::string>();
}

// A Split/Replace pattern: {"Regex": r} or {"String": s} (escaped into a regex when regex is
// wanted).
std::string pattern_of(const json& p, bool as_regex, const std::string& where,
                       const std::string& src) {
  if (p.contains("Regex")) {
    if (!as_regex) fail(src, where + "pattern.Regex is not supported here");
    return p.at("Regex").get<std::string>();
  }
  std::string s = require(p, "String", where + "pattern.", src).get<std::string>();
  if (!as_regex) return s;
  std::string out;
  for (char c : s) {
    bool plain =
        static_cast<unsigned char>(c) >= 0x80 || std::isalnum(static_cast<unsigned char>(c));
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

bool contains_type(const json& j, const std::string& type, int depth = 0) {
  if (!j.is_object() || depth > kMaxNesting) return false;
  if (j.value("type", "") == type) return true;
  for (const char* list : {"pretokenizers", "decoders", "normalizers"})
    if (j.contains(list))
      for (const auto& sub : j.at(list))
        if (contains_type(sub, type, depth + 1)) return true;
  return false;
}

void add_normalizers(const json& n, const std::string& src, std::vector<Normalizer>& out,
                     int depth = 0) {
  if (n.is_null()) return;
  if (depth > kMaxNesting) fail(src, "normalizer nesting too deep");
  std::string type = type_of(n, "normalizer.", src);
  if (type == "Sequence") {
    for (const auto& sub : require(n, "normalizers", "normalizer.", src))
      add_normalizers(sub, src, out, depth + 1);
  } else if (type == "NFC") {
    out.push_back({Normalizer::Kind::kNfc, "", ""});
  } else if (type == "Prepend") {
    out.push_back({Normalizer::Kind::kPrepend,
                   require(n, "prepend", "normalizer.", src).get<std::string>(), ""});
  } else if (type == "Replace") {
    std::string from =
        pattern_of(require(n, "pattern", "normalizer.", src), false, "normalizer.", src);
    out.push_back({Normalizer::Kind::kReplace, from,
                   require(n, "content", "normalizer.", src).get<std::string>()});
  } else {
    fail(src, "normalizer type '" + type + "' is not supported");
  }
}

SplitBehavior behavior_of(const std::string& b, const std::string& src) {
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  fail(src, "pre_tokenizer Split behavior '" + b + "' is not supported");
}

PreTokenizer::Prepend prepend_of(const json& m, const std::string& src) {
  if (m.contains("prepend_scheme")) {
    std::string s = m.at("prepend_scheme").get<std::string>();
    if (s == "always") return PreTokenizer::Prepend::kAlways;
    if (s == "first") return PreTokenizer::Prepend::kFirst;
    if (s == "never") return PreTokenizer::Prepend::kNever;
    fail(src, "Metaspace prepend_scheme '" + s + "' is not supported");
  }
  return m.value("add_prefix_space", true) ? PreTokenizer::Prepend::kAlways
                                           : PreTokenizer::Prepend::kNever;
}

void add_pretokenizers(const json& p, const std::string& src, std::vector<PreTokenizer>& out,
                       int depth = 0) {
  if (p.is_null()) return;
  if (depth > kMaxNesting) fail(src, "pre_tokenizer nesting too deep");
  std::string type = type_of(p, "pre_tokenizer.", src);
  if (type == "Sequence") {
    for (const auto& sub : require(p, "pretokenizers", "pre_tokenizer.", src))
      add_pretokenizers(sub, src, out, depth + 1);
    return;
  }
  PreTokenizer t;
  if (type == "Split") {
    t.regex = std::make_shared<Regex>(
        pattern_of(require(p, "pattern", "pre_tokenizer.", src), true, "pre_tokenizer.", src));
    t.behavior = behavior_of(p.value("behavior", "Isolated"), src);
    t.invert = p.value("invert", false);
  } else if (type == "ByteLevel") {
    t.kind = PreTokenizer::Kind::kByteLevel;
    t.add_prefix_space = p.value("add_prefix_space", true);
    if (p.value("use_regex", true)) t.regex = std::make_shared<Regex>(kGpt2Pattern);
  } else if (type == "Metaspace") {
    t.kind = PreTokenizer::Kind::kMetaspace;
    t.replacement = p.value("replacement", std::string("\xE2\x96\x81"));
    if (t.replacement.empty()) fail(src, "pre_tokenizer Metaspace replacement is empty");
    t.prepend = prepend_of(p, src);
    t.split = p.value("split", true);
  } else {
    fail(src, "pre_tokenizer type '" + type + "' is not supported");
  }
  out.push_back(std::move(t));
}

// What the decoder makes of one token; also sets the leading-space strip.
struct DecoderChain {
  std::vector<json> steps;
  bool strip = false;
};

void collect_decoders(const json& dec, const std::string& src, DecoderChain& chain, int depth = 0) {
  if (dec.is_null()) return;
  if (depth > kMaxNesting) fail(src, "decoder nesting too deep");
  std::string type = type_of(dec, "decoder.", src);
  if (type == "Sequence") {
    for (const auto& sub : require(dec, "decoders", "decoder.", src))
      collect_decoders(sub, src, chain, depth + 1);
    return;
  }
  if (type == "Strip") {
    std::string content = dec.value("content", std::string(" "));
    int start = dec.value("start", 0), stop = dec.value("stop", 0);
    if (content != " " || start > 1 || stop != 0)
      fail(src, "decoder Strip other than (' ', 1, 0) is not supported");
    chain.strip = chain.strip || start == 1;
    return;
  }
  if (type == "Metaspace")
    chain.strip = chain.strip || prepend_of(dec, src) != PreTokenizer::Prepend::kNever;
  if (type == "Replace")
    pattern_of(require(dec, "pattern", "decoder.", src), false, "decoder.", src);
  if (type != "ByteLevel" && type != "Replace" && type != "ByteFallback" && type != "Fuse" &&
      type != "Metaspace")
    fail(src, "decoder type '" + type + "' is not supported");
  chain.steps.push_back(dec);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t k = s.find(from); k != std::string::npos; k = s.find(from, k + to.size()))
    s.replace(k, from.size(), to);
  return s;
}

std::string decode_token(const DecoderChain& chain, std::string piece) {
  for (const json& step : chain.steps) {
    std::string type = step.at("type").get<std::string>();
    if (type == "ByteLevel") {
      piece = unicode::byte_level_to_bytes(piece);
    } else if (type == "Replace") {
      piece = replace_all(piece, pattern_of(step.at("pattern"), false, "", ""),
                          step.at("content").get<std::string>());
    } else if (type == "Metaspace") {
      piece = replace_all(piece, step.value("replacement", std::string("\xE2\x96\x81")), " ");
    } else if (type == "ByteFallback" && piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 &&
               piece[5] == '>') {
      piece =
          std::string(1, static_cast<char>(std::strtol(piece.substr(3, 2).c_str(), nullptr, 16)));
    }
  }
  return piece;
}

std::vector<std::pair<std::string, std::string>> read_merges(const json& model,
                                                             const std::string& src) {
  std::vector<std::pair<std::string, std::string>> merges;
  const json& list = require(model, "merges", "model.", src);
  if (!list.is_array()) fail(src, "model.merges is not a list");
  for (const auto& m : list) {
    if (m.is_array() && m.size() == 2) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      continue;
    }
    std::string s = m.is_string() ? m.get<std::string>() : std::string();
    size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
      fail(src, "model.merges[" + std::to_string(merges.size()) + "] is not 'left right'");
    merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
  }
  return merges;
}

void read_model(const json& j, bool byte_level, TokenizerData& d) {
  const std::string& src = d.source;
  const json& model = require(j, "model", "", src);
  std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") fail(src, "model.type '" + type + "' is not supported (only BPE)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && model.at(key).is_string() &&
        !model.at(key).get<std::string>().empty())
      fail(src, std::string("model.") + key + " is not supported");
  if (model.contains("dropout") && model.at("dropout").is_number() &&
      model.at("dropout").get<double>() > 0)
    fail(src, "model.dropout is not supported");
  build_merges_bpe(d, require(model, "vocab", "model.", src), read_merges(model, src), byte_level);
  BpeModel& bpe = d.pipeline.model;
  bpe.byte_fallback = model.value("byte_fallback", false);
  bpe.fuse_unk = model.value("fuse_unk", false);
  bpe.ignore_merges = model.value("ignore_merges", false);
  if (model.contains("unk_token") && model.at("unk_token").is_string()) {
    auto it = d.token_ids.find(model.at("unk_token").get<std::string>());
    if (it == d.token_ids.end()) fail(src, "model.unk_token is not in model.vocab");
    bpe.unk_id = it->second;
  }
}

void read_added_tokens(const json& j, TokenizerData& d) {
  if (!j.contains("added_tokens") || j.at("added_tokens").is_null()) return;
  for (const auto& a : j.at("added_tokens")) {
    AddedToken t;
    t.id = json_id(require(a, "id", "added_tokens[].", d.source), d.source, "added_tokens[].id");
    t.content = require(a, "content", "added_tokens[].", d.source).get<std::string>();
    t.special = a.value("special", false);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    d.add_token(t);
  }
}

void read_post_processor(const json& p, TokenizerData& d, int depth = 0) {
  if (p.is_null()) return;
  if (depth > kMaxNesting) fail(d.source, "post_processor nesting too deep");
  std::string type = type_of(p, "post_processor.", d.source);
  if (type == "Sequence") {
    for (const auto& sub : require(p, "processors", "post_processor.", d.source))
      read_post_processor(sub, d, depth + 1);
  } else if (type == "TemplateProcessing") {
    const json& specials = require(p, "special_tokens", "post_processor.", d.source);
    bool seen_a = false;
    d.prefix.clear();
    d.suffix.clear();
    for (const auto& item : require(p, "single", "post_processor.", d.source)) {
      if (item.contains("Sequence")) {
        seen_a = true;
        continue;
      }
      std::string name =
          require(require(item, "SpecialToken", "post_processor.single[].", d.source), "id",
                  "post_processor.single[].SpecialToken.", d.source)
              .get<std::string>();
      for (const auto& id :
           require(require(specials, name.c_str(), "post_processor.special_tokens.", d.source),
                   "ids", "post_processor.special_tokens." + name + ".", d.source))
        (seen_a ? d.suffix : d.prefix).push_back(json_id(id, d.source, "post_processor ids"));
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    d.prefix = {json_id(require(p, "cls", "post_processor.", d.source).at(1), d.source, "cls")};
    d.suffix = {json_id(require(p, "sep", "post_processor.", d.source).at(1), d.source, "sep")};
  } else if (type != "ByteLevel") {
    fail(d.source, "post_processor type '" + type + "' is not supported");
  }
}

}  // namespace

std::unique_ptr<TokenizerData> load_tokenizer_json_text(const std::string& text,
                                                        const std::string& source) {
  auto d = std::make_unique<TokenizerData>();
  d->source = source;
  json j = parse_json(text, source);
  try {
    if (!j.is_object()) fail(source, "not a JSON object");
    const json null;
    const json& norm = j.contains("normalizer") ? j.at("normalizer") : null;
    const json& pre = j.contains("pre_tokenizer") ? j.at("pre_tokenizer") : null;
    const json& dec = j.contains("decoder") ? j.at("decoder") : null;
    bool byte_level = contains_type(pre, "ByteLevel");
    read_model(j, byte_level, *d);
    add_normalizers(norm, source, d->pipeline.normalizers);
    add_pretokenizers(pre, source, d->pipeline.pretokenizers);
    DecoderChain chain;
    collect_decoders(dec, source, chain);
    for (size_t id = 0; id < d->tokens.size(); ++id)
      if (!d->tokens[id].empty()) d->pieces[id] = decode_token(chain, d->tokens[id]);
    d->strip_leading_space = chain.strip;
    if (!byte_level) d->pipeline.model.enable_marker_split("\xE2\x96\x81");
    read_added_tokens(j, *d);
    read_post_processor(j.contains("post_processor") ? j.at("post_processor") : null, *d);
    if (!d->prefix.empty()) d->bos = d->prefix.front();
    if (!d->suffix.empty()) d->eos = d->suffix.back();
  } catch (const nlohmann::json::exception& e) {
    fail(source, std::string("unexpected JSON layout: ") + e.what());
  }
  return d;
}

std::unique_ptr<TokenizerData> load_tokenizer_json(const std::string& path) {
  return load_tokenizer_json_text(read_file(path), path);
}

}  // namespace unillm::io::tok
