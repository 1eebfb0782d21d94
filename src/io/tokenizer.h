// Exact tokenizers for the Llama family: SentencePiece BPE (Llama 2 tokenizer.model or its HF
// tokenizer.json), byte-level BPE (tokenizer.json, or vocab.json + merges.txt as Qwen2/GPT-2) and
// tiktoken ranks files (Llama 3 original/tokenizer.model). Ids match Hugging Face tokenizers.
//
// Contract notes:
// - encode() takes UTF-8. Ill-formed UTF-8 is repaired first: each maximal ill-formed subsequence
//   becomes U+FFFD (as Python's bytes.decode("utf-8", errors="replace")), so encode(b) equals HF's
//   encode(b.decode("utf-8", "replace")). It never throws on text.
// - decode() concatenates the tokens' bytes (special tokens as their text unless skipped), strips
//   the one leading space a SentencePiece dummy prefix adds, and repairs ill-formed UTF-8 the same
//   way. Ids outside the vocabulary are skipped (as HF does). No clean_up_tokenization_spaces.
// - Added tokens are matched in the raw text, longest first. Non-special added tokens always split
//   the text (as HF does); special ones only with EncodeOptions::parse_special.
// - A Tokenizer is immutable after load(): encode/decode may be called from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"  // load() throws IoError

namespace unillm::io {

namespace tok {
struct TokenizerData;
}

struct EncodeOptions {
  bool add_special_tokens = true;  // BOS/EOS per the tokenizer's config
  bool parse_special = false;  // special-token strings in text become special ids only when true
};

class Tokenizer {
 public:
  // Chooses by files present in dir, never by model_type: tokenizer.json; else tokenizer.model
  // (SentencePiece protobuf, or a tiktoken ranks file as Llama 3's, sniffed); else vocab.json +
  // merges.txt. Reads tokenizer_config.json / added_tokens.json / special_tokens_map.json /
  // generation_config.json when present. Throws IoError naming the file and what is wrong.
  static std::unique_ptr<Tokenizer> load(const std::string& dir);
  // A tokenizer.json given as text (no side files); source names it in error messages.
  static std::unique_ptr<Tokenizer> from_tokenizer_json(
      const std::string& json_text, const std::string& source = "tokenizer.json");
  virtual ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& o = {}) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const;  // max id + 1, incl. added tokens
  const std::string& source() const;  // the file it was read from (tokenizer.json, …)
  int32_t bos_id() const;      // -1 when absent
  int32_t eos_id() const;      // -1 when absent
  bool adds_bos() const;       // encode(add_special_tokens=true) starts with bos_id()
  // eos_id() plus the other end-of-generation ids (generation_config.json eos_token_id list;
  // Llama 3's <|eot_id|>). Sorted, unique.
  std::vector<int32_t> stop_ids() const;
  std::optional<int32_t> token_to_id(const std::string& token) const;
  std::string id_to_token(int32_t id) const;  // the vocab string ("▁Hello", "Ġworld"); "" if none
  // The bytes token id adds in the middle of a decoded text (" Hello", " world"; a byte-fallback
  // token its byte, possibly part of a UTF-8 character); "" for special tokens and unknown ids.
  std::string token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  // The loaded vocabulary, merges/scores and special-token state (tokenizer_internal.h), for
  // exporters that write the tokenizer in another format (GGUF). Read-only.
  const tok::TokenizerData& data() const;

  // Adding tokens after load (tokenizer_added.cpp), as HF's add_tokens / add_special_tokens do for
  // LLaMA-Factory's add_tokens, add_special_tokens and template stop words. Not thread-safe: call
  // before the tokenizer is shared. Each token not yet in the vocabulary gets the next id
  // (vocab_size()); one already there is left as it is (a special one is not re-marked). Returns
  // how many were new. Empty tokens: ConfigError.
  int add_tokens(const std::vector<std::string>& tokens, bool special);
  // Makes token the EOS (HF add_special_tokens({"eos_token": token})), adding it as a special token
  // when new. Returns true when it was added.
  bool set_eos_token(const std::string& token);
  // HF's split_special_tokens (LLaMA-Factory's key of that name): when on, special-token strings
  // in text are tokenized as text even under EncodeOptions::parse_special. Loaded from
  // tokenizer_config.json's "split_special_tokens"; save_files writes it. Call before sharing.
  void set_split_special_tokens(bool on);
  bool split_special_tokens() const;
  // Tokens added, the EOS replaced or split_special_tokens changed since load (save_files then
  // writes what a copy of the loaded files would not say).
  bool modified_since_load() const;
  // Ids added by add_tokens / set_eos_token since load, ascending.
  std::vector<int32_t> added_since_load() const;
  // Writes the tokenizer files of src_dir (the directory it was loaded from) into dst_dir with the
  // tokens added since load: tokenizer.json "added_tokens", tokenizer_config.json
  // "added_tokens_decoder" / "additional_special_tokens" / "eos_token", special_tokens_map.json;
  // a directory without tokenizer_config.json gets one. Hugging Face transformers loads the result
  // with the same ids. Each file is written atomically.
  void save_files(const std::string& src_dir, const std::string& dst_dir) const;

 private:
  explicit Tokenizer(std::unique_ptr<tok::TokenizerData> data);
  std::unique_ptr<tok::TokenizerData> d_;
  friend class StreamDecoder;
};

// Streaming-safe decode: push ids one at a time; the returned pieces concatenated (with finish())
// equal decode(all ids), and every returned piece ends on a complete UTF-8 boundary (incomplete
// bytes are held back until the next push or finish()). Keeps a reference to the tokenizer.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);
  std::string finish();  // flushes held-back bytes (as U+FFFD) and resets

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool started_ = false;  // a non-empty token was seen (the leading-space strip is done)
  std::string pending_;   // bytes of an incomplete UTF-8 sequence
};

}  // namespace unillm::io
