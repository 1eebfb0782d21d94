// Internals shared by the tokenizer loaders: the data a Tokenizer holds, the encode pipeline
// (normalizers -> pre-tokenizers -> BPE model) and the helpers the loaders use. Not a public API.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace unillm::io::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;  // swallow whitespace before the token
  bool rstrip = false;  // swallow whitespace after the token
};

// A compiled PCRE2 pattern (UTF + UCP, JIT when available). Thread-safe to use.
class Regex {
 public:
  explicit Regex(const std::string& pattern);  // throws IoError("[tokenizer] bad regex ...")
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Non-empty match spans [start, end) in s (valid UTF-8), left to right.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

// The pre-tokenizer regexes of the families we know.
extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;
extern const char* const kQwen2Pattern;

struct Normalizer {
  enum class Kind { kNfc, kPrepend, kReplace, kCollapseSpaces };
  Kind kind;
  std::string a, b;  // kPrepend: a; kReplace: a -> b
};

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizer {
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  Kind kind = Kind::kSplit;
  std::shared_ptr<Regex> regex;  // kSplit; kByteLevel with use_regex (GPT-2 pattern)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;             // kByteLevel
  std::string replacement = "\xE2\x96\x81";  // kMetaspace
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  bool split = true;  // kMetaspace
};

// BPE over one pre-token piece. Byte modes start from single bytes (byte-level BPE, tiktoken);
// char modes from UTF-8 characters (SentencePiece style, with byte fallback).
struct BpeModel {
  enum class Mode { kByteMerges, kByteRanks, kCharMerges, kCharScores };
  struct Merge {
    int32_t rank, id;
  };
  Mode mode = Mode::kByteMerges;
  StringMap vocab;  // model vocab: raw bytes (byte modes) or text (char modes) -> id
  std::unordered_map<uint64_t, Merge> merges;  // (left id << 32 | right id) -> merge
  std::vector<float> scores;                   // kCharScores: per id
  std::vector<uint8_t> mergeable;              // kCharScores: id may result from a merge
  std::array<int32_t, 256> byte_ids{};         // byte -> id (byte modes) / <0xXX> id (fallback)
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;  // a piece that is itself in the vocab is emitted whole
  int32_t unk_id = -1;

  // Char modes: when no vocab entry has `marker` after another character ("s▁" never occurs, as
  // in SentencePiece vocabularies trained with split_by_whitespace), no merge can cross the start
  // of a marker run, so encode() splits pieces there first: same ids, small heaps. Enabled only
  // when the vocabulary is checked to allow it.
  std::string split_marker;
  void enable_marker_split(const std::string& marker);

  BpeModel() { byte_ids.fill(-1); }
  void encode(std::string_view piece, std::vector<int32_t>& out) const;
};

struct Pipeline {
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pretokenizers;
  BpeModel model;
  // Normalizes and pre-tokenizes one segment between added tokens, then runs the model.
  void encode(std::string_view segment, bool at_start, std::vector<int32_t>& out) const;
};

// Ids beyond this are rejected as malformed (the largest real vocabularies have ~262k entries).
constexpr int32_t kMaxVocab = 1 << 21;
// Nesting limit for Sequence normalizers / pre-tokenizers / decoders / post-processors.
constexpr int kMaxNesting = 16;

// Everything a Tokenizer holds. Loaders fill it; finalize() checks and indexes it.
struct TokenizerData {
  std::string source;               // file named in error messages
  std::vector<std::string> tokens;  // vocab string per id ("" for holes)
  std::vector<std::string> pieces;  // bytes decode() emits per id
  std::vector<uint8_t> special;     // per id
  StringMap token_ids;              // vocab string -> id (model vocab and added tokens)
  std::vector<AddedToken> added;
  Pipeline pipeline;
  int32_t bos = -1, eos = -1;
  std::vector<int32_t> prefix, suffix;  // ids add_special_tokens puts around the text
  std::vector<int32_t> stop_ids;
  bool strip_leading_space = false;  // decoder strips one leading space (SentencePiece prefix)
  int32_t loaded_size = 0;  // tokens.size() after load; ids from here on were added later
  bool eos_changed = false;  // set_eos_token replaced the loaded EOS
  // HF's split_special_tokens (tokenizer_config.json, or LLaMA-Factory's key through
  // Tokenizer::set_split_special_tokens): special-token strings in text stay text even when an
  // encode asks for parse_special; non-special added tokens still split.
  bool split_special = false;
  bool split_special_changed = false;  // set after load: save_files writes it

  // Added-token matcher (a byte trie), built by finalize().
  struct TrieNode {
    std::vector<std::pair<unsigned char, int32_t>> next;
    int32_t added = -1;  // index into `added`
  };
  std::vector<TrieNode> trie;
  std::array<bool, 256> trie_first{};

  void set_token(int32_t id, const std::string& token, const std::string& piece);
  // Adds or updates an added token (its vocab string and piece are its content).
  void add_token(const AddedToken& t);
  void finalize();
};

// Loaders; each returns data with the model, vocab and defaults set (before configs are applied).
std::unique_ptr<TokenizerData> load_sentencepiece_model(const std::string& path);
std::unique_ptr<TokenizerData> load_tiktoken(const std::string& path);
std::unique_ptr<TokenizerData> load_tokenizer_json(const std::string& path);
std::unique_ptr<TokenizerData> load_tokenizer_json_text(const std::string& text,
                                                        const std::string& source);
std::unique_ptr<TokenizerData> load_vocab_merges(const std::string& dir);
// tokenizer_config.json, added_tokens.json, special_tokens_map.json, generation_config.json.
void apply_hf_configs(const std::string& dir, TokenizerData& d);
// True when the file at path looks like a tiktoken ranks file ("<base64> <rank>" lines).
bool sniff_tiktoken(const std::string& path);

// Fills d's vocabulary and a merges BPE model: vocab is {token: id}, merges[i] = (left, right) with
// rank i. byte_level: tokens are in GPT-2's byte alphabet and the model runs on raw bytes (pieces =
// the bytes); otherwise on UTF-8 characters with <0xXX> byte tokens (pieces = the tokens).
void build_merges_bpe(TokenizerData& d, const nlohmann::json& vocab,
                      const std::vector<std::pair<std::string, std::string>>& merges,
                      bool byte_level);

// Helpers.
std::string read_file(const std::string& path);  // throws IoError when unreadable
nlohmann::json parse_json(const std::string& text, const std::string& source);
bool file_exists(const std::string& path);
// "[tokenizer] <source>: <what>" as an IoError.
[[noreturn]] void fail(const std::string& source, const std::string& what);
// v as a token id: a JSON integer that fits int32 (a float or a bigger number would make
// get<int32_t>() undefined or wrap); else IoError "<what> must be an integer id".
int32_t json_id(const nlohmann::json& v, const std::string& source, const std::string& what);

}  // namespace unillm::io::tok
