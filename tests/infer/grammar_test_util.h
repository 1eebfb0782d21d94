// Helpers shared by the grammar and JSON-schema tests: a real vocabulary as byte strings, the
// brute-force reference for allowed_tokens, random walks, and a small JSON Schema validator
// written independently of the schema compiler.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "infer/grammar.h"

namespace unillm::infer::testing {

// The Llama 2 vocabulary (32000 ids) as the bytes each token stands for: "▁" is a space,
// "<0xXX>" the byte; special tokens are empty.
const std::vector<std::string>& llama2_token_bytes();

// allowed[i] = 1 when a copy of m accepts token i's (non-empty) bytes.
std::vector<uint8_t> brute_force_allowed(const GrammarMatcher& m,
                                         const std::vector<std::string>& vocab);

// Index of the first byte of text the grammar rejects (fed byte by byte from the start), or -1
// when every byte is accepted; *complete tells whether the accepted text is a whole sentence.
int reject_at(const std::shared_ptr<const Grammar>& g, std::string_view text,
              bool* complete = nullptr);

// From the start state, picks random allowed tokens (a third of the picks among those holding
// '"', ']', '}' or ',', so strings and containers end) until complete — then stopping with
// probability 1/2 or when nothing may follow — or max_tokens; returns the text and whether it
// completed. Every pick is also checked to be accepted.
struct Walk {
  std::string text;
  bool complete = false;
};
Walk random_walk(const std::shared_ptr<const Grammar>& g, const TokenTrie& trie,
                 const std::vector<std::string>& vocab, std::mt19937& rng, int max_tokens);

// JSON Schema validation of the subset the compiler supports, with the standard meaning (absent
// additionalProperties allows other members; oneOf needs exactly one match). "" when valid, else
// why not.
std::string validate(const nlohmann::json& value, const nlohmann::json& schema);

}  // namespace unillm::infer::testing
