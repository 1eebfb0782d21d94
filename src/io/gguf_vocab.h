// Tokenizers in GGUF, both ways. llama.cpp knows two vocabularies for the Llama family:
// "llama" (SentencePiece: tokens, scores, token types; merged greedily by score) and "gpt2"
// (byte-level BPE: tokens, token types, ranked merges, plus tokenizer.ggml.pre naming the
// pre-tokenizer regex). Token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
// 6 byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/tokenizer.h"

namespace unillm::io {

struct GgufVocabOptions {
  // The embedding rows: the token list is padded to this length with "[PADn]" (unused), as
  // llama.cpp's converter does, since llama.cpp sizes the vocabulary by the token list.
  int64_t vocab_size = 0;
  std::string model_type;  // picks tokenizer.ggml.pre when tokenizer.json does not tell
  int32_t pad_id = -1;     // config.json pad_token_id (-1: tokenizer_config.json's pad_token)
  // config.json bos_token_id / eos_token_id: written when the tokenizer names none (Qwen2's
  // tokenizer has no BOS; its config says 151643), as llama.cpp's converter does.
  int32_t config_bos_id = -1, config_eos_id = -1;
  std::string tokenizer_dir;  // tokenizer.json (its pre-tokenizer), tokenizer_config.json
};

// Appends the tokenizer.ggml.* keys (and tokenizer.chat_template when tokenizer_config.json
// has one). SentencePiece-style vocabularies become "llama": scores from tokenizer.model, or,
// for a tokenizer.json with merges, −rank of the merge that makes each token (so greedy-by-score
// merging follows the merge order). Byte-level BPE becomes "gpt2". notes gets lines worth
// logging. Throws ConfigError for a tiktoken-only tokenizer (no merges to write) and for a
// tokenizer with more tokens than vocab_size.
void add_gguf_vocab(const Tokenizer& tokenizer, const GgufVocabOptions& o, GgufMetadata& md,
                    std::vector<std::string>* notes);

// Hugging Face tokenizer files rebuilt from a GGUF's tokenizer.ggml.* keys: tokenizer.json
// (a "llama" vocabulary as transformers' LlamaConverter writes one, merges derived from the
// scores; a "gpt2" one with its merges and the pre-tokenizer tokenizer.ggml.pre names) and
// tokenizer_config.json (bos/eos/unk/pad, add_bos_token/add_eos_token, chat_template).
// IoError naming the file and key when the vocabulary is missing, inconsistent or of another
// model.
struct HfTokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};
HfTokenizerFiles hf_tokenizer_from_gguf(const GgufFile& f, int64_t model_max_length);

}  // namespace unillm::io
