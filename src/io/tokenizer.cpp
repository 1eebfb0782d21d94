// Tokenizer: load() picks the loader by the files present; encode() splits the text on added
// tokens and runs the pipeline on the rest; decode()/StreamDecoder join token bytes and repair
// UTF-8 the same way, so streamed pieces concatenate to the full decode.
#include "io/tokenizer.h"

#include <algorithm>

#include "io/tokenizer_internal.h"
#include "io/tokenizer_unicode.h"

namespace unillm::io {
namespace tok {

void TokenizerData::set_token(int32_t id, const std::string& token, const std::string& piece) {
  if (id < 0 || id >= kMaxVocab)
    fail(source, "token id " + std::to_string(id) + " of '" + token + "' is outside [0, 2^21)");
  if (static_cast<size_t>(id) >= tokens.size()) {
    tokens.resize(id + 1);
    pieces.resize(id + 1);
    special.resize(id + 1, 0);
  }
  tokens[id] = token;
  pieces[id] = piece;
  token_ids[token] = id;
}

void TokenizerData::add_token(const AddedToken& t) {
  if (t.content.empty()) fail(source, "added token " + std::to_string(t.id) + " has empty content");
  auto it = std::find_if(added.begin(), added.end(),
                         [&](const AddedToken& a) { return a.content == t.content; });
  if (it != added.end())
    *it = t;
  else
    added.push_back(t);
  set_token(t.id, t.content, t.content);
  special[t.id] = t.special;
}

void TokenizerData::finalize() {
  if (tokens.empty()) fail(source, "empty vocabulary");
  trie.assign(1, TrieNode{});
  trie_first.fill(false);
  for (size_t k = 0; k < added.size(); ++k) {
    int32_t node = 0;
    for (unsigned char c : added[k].content) {
      auto& next = trie[node].next;
      auto it = std::find_if(next.begin(), next.end(), [c](auto& e) { return e.first == c; });
      if (it == next.end()) {
        next.emplace_back(c, static_cast<int32_t>(trie.size()));
        node = static_cast<int32_t>(trie.size());
        trie.emplace_back();
      } else {
        node = it->second;
      }
    }
    trie[node].added = static_cast<int32_t>(k);
    trie_first[static_cast<unsigned char>(added[k].content[0])] = true;
  }
  auto in_range = [&](int32_t id) { return id >= 0 && id < static_cast<int32_t>(tokens.size()); };
  if (bos >= 0 && !in_range(bos)) fail(source, "bos id " + std::to_string(bos) + " out of range");
  if (eos >= 0 && !in_range(eos)) fail(source, "eos id " + std::to_string(eos) + " out of range");
  for (int32_t id : prefix)
    if (!in_range(id)) fail(source, "post-processor id " + std::to_string(id) + " out of range");
  for (int32_t id : suffix)
    if (!in_range(id)) fail(source, "post-processor id " + std::to_string(id) + " out of range");
  if (eos >= 0) stop_ids.push_back(eos);
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
}

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Longest eligible added token at text[pos]: its index into d.added, or -1.
int32_t match_added(const TokenizerData& d, std::string_view text, size_t pos, bool parse_special,
                    size_t& len) {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    const auto& next = d.trie[node].next;
    auto it = std::find_if(next.begin(), next.end(), [c](auto& e) { return e.first == c; });
    if (it == next.end()) break;
    node = it->second;
    int32_t k = d.trie[node].added;
    if (k >= 0 && (parse_special || !d.added[k].special)) {
      best = k;
      len = i + 1 - pos;
    }
  }
  return best;
}

}  // namespace
}  // namespace tok

using tok::TokenizerData;

Tokenizer::Tokenizer(std::unique_ptr<TokenizerData> data) : d_(std::move(data)) {}
Tokenizer::~Tokenizer() = default;

const tok::TokenizerData& Tokenizer::data() const { return *d_; }

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& dir) {
  std::unique_ptr<TokenizerData> d;
  if (tok::file_exists(dir + "/tokenizer.json")) {
    d = tok::load_tokenizer_json(dir + "/tokenizer.json");
  } else if (tok::file_exists(dir + "/tokenizer.model")) {
    std::string path = dir + "/tokenizer.model";
    d = tok::sniff_tiktoken(path) ? tok::load_tiktoken(path) : tok::load_sentencepiece_model(path);
  } else if (tok::file_exists(dir + "/vocab.json")) {
    d = tok::load_vocab_merges(dir);
  } else {
    UNILLM_THROW(IoError, "[tokenizer] ", dir,
                 ": no tokenizer.json, tokenizer.model or vocab.json + merges.txt");
  }
  tok::apply_hf_configs(dir, *d);
  d->finalize();
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(d)));
}

std::unique_ptr<Tokenizer> Tokenizer::from_tokenizer_json(const std::string& json_text,
                                                          const std::string& source) {
  std::unique_ptr<TokenizerData> d = tok::load_tokenizer_json_text(json_text, source);
  d->finalize();
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(d)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& o) const {
  std::string repaired;
  if (!unicode::utf8_valid(text)) {
    unicode::utf8_repair(text, true, repaired);
    text = repaired;
  }
  std::vector<int32_t> ids;
  if (o.add_special_tokens) ids = d_->prefix;
  size_t seg = 0;  // start of the pending plain segment
  for (size_t pos = 0; pos < text.size();) {
    size_t len = 0;
    int32_t k = d_->trie_first[static_cast<unsigned char>(text[pos])]
                    ? tok::match_added(*d_, text, pos, o.parse_special && !d_->split_special, len)
                    : -1;
    if (k < 0) {
      ++pos;
      continue;
    }
    const tok::AddedToken& t = d_->added[k];
    size_t end = pos;
    if (t.lstrip)
      while (end > seg && tok::is_space(text[end - 1])) --end;
    if (end > seg) d_->pipeline.encode(text.substr(seg, end - seg), seg == 0, ids);
    ids.push_back(t.id);
    pos += len;
    if (t.rstrip)
      while (pos < text.size() && tok::is_space(text[pos])) ++pos;
    seg = pos;
  }
  if (seg < text.size()) d_->pipeline.encode(text.substr(seg), seg == 0, ids);
  if (o.add_special_tokens) ids.insert(ids.end(), d_->suffix.begin(), d_->suffix.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  StreamDecoder stream(*this, skip_special_tokens);
  std::string out;
  for (int32_t id : ids) out += stream.push(id);
  out += stream.finish();
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(d_->tokens.size()); }
const std::string& Tokenizer::source() const { return d_->source; }
int32_t Tokenizer::bos_id() const { return d_->bos; }
int32_t Tokenizer::eos_id() const { return d_->eos; }
bool Tokenizer::adds_bos() const { return !d_->prefix.empty() && d_->prefix[0] == d_->bos; }
std::vector<int32_t> Tokenizer::stop_ids() const { return d_->stop_ids; }

std::optional<int32_t> Tokenizer::token_to_id(const std::string& token) const {
  auto it = d_->token_ids.find(token);
  if (it == d_->token_ids.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  return id >= 0 && id < vocab_size() ? d_->tokens[id] : std::string();
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(d_->pieces.size()) || d_->special[id]) return {};
  return d_->pieces[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && d_->special[id];
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  const TokenizerData& d = *tokenizer_.d_;
  if (id < 0 || id >= static_cast<int32_t>(d.pieces.size())) return {};
  if (skip_special_ && d.special[id]) return {};
  std::string_view piece = d.pieces[id];
  if (piece.empty()) return {};
  if (!started_) {
    started_ = true;
    if (d.strip_leading_space && piece[0] == ' ') piece.remove_prefix(1);
  }
  pending_.append(piece);
  std::string out;
  size_t used = unicode::utf8_repair(pending_, false, out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  unicode::utf8_repair(pending_, true, out);
  pending_.clear();
  started_ = false;
  return out;
}

}  // namespace unillm::io
