// llama2.c tokenizer.bin (int32 max_token_length, then per token: f32 score, int32 len, bytes) and
// its conversion to a Hugging Face LlamaTokenizerFast tokenizer.json (SentencePiece BPE with
// byte fallback; merges derived from vocab + scores as HF's convert_slow_tokenizer does).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace unillm::io {

struct Llama2cTokenizer {
  int32_t max_token_length = 0;
  std::vector<std::string> pieces;  // bytes as stored: ' ' for '▁', "\n<s>\n" for BOS
  std::vector<float> scores;
};

// Reads PATH. expected_vocab >= 0: exactly that many records must be there (the checkpoint's
// vocab_size); < 0: records are read until the end of the file. IoError "[llama2c] PATH: ...".
Llama2cTokenizer read_llama2c_tokenizer(const std::string& path, int64_t expected_vocab = -1);

// HF piece strings: ids 0, 1, 2 -> "<unk>", "<s>", "</s>"; ' ' -> "▁". Checks UTF-8 and that
// no piece repeats (IoError naming PATH and the ids).
std::vector<std::string> llama2c_hf_pieces(const Llama2cTokenizer& t, const std::string& path);

// BPE merges of a SentencePiece vocabulary, as transformers' generate_merges(vocab, vocab_scores):
// every split (at code point boundaries) of a piece into two vocab pieces, per piece ordered by
// (id of left, id of right); then stably sorted by (score, chars of left, chars of right),
// descending. scores[i] is the score of pieces[i].
std::vector<std::pair<std::string, std::string>> sentencepiece_bpe_merges(
    const std::vector<std::string>& pieces, const std::vector<float>& scores);

// tokenizer.json in LlamaTokenizerFast layout (the ids 0..2 get score 0, as HF's LlamaConverter).
nlohmann::ordered_json llama2c_tokenizer_json(const Llama2cTokenizer& t, const std::string& path);
// tokenizer_config.json: LlamaTokenizer, add_bos_token true, add_eos_token false, <s>/</s>/<unk>.
nlohmann::ordered_json llama_tokenizer_config_json(int64_t model_max_length);

}  // namespace unillm::io
