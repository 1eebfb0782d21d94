// What a client asks the serving engine for, and what each engine step gives back per request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "infer/sampler.h"

namespace unillm::infer {

class Grammar;  // infer/grammar.h

struct Request {
  std::vector<int32_t> prompt;  // token ids, not empty
  SamplingParams sampling;
  uint64_t seed = 42;  // the request's own RNG: its tokens do not depend on the batch
  int64_t max_tokens = 256;
  // Generation ends after sampling one of these (the token is part of the output), unless
  // ignore_eos. Stop strings are the caller's (it detokenises and calls Engine::finish).
  std::vector<int32_t> stop_ids;
  bool ignore_eos = false;
  // -1: no logprobs; N >= 0: the sampled token's log-probability and the N most likely
  // alternatives (log-softmax of the model's logits, before the sampling processors).
  int logprobs = -1;
  std::string adapter;  // "" = the model's active adapters (CausalLM::set_active_adapters)
  // Structured output: every token is sampled among those the grammar accepts next, a stop id
  // only once the output is a whole sentence of it, and the request ends (stop) when the
  // grammar admits nothing more. Needs Engine::set_vocabulary.
  std::shared_ptr<const Grammar> grammar;
};

enum class FinishReason { none, length, stop, abort };
const char* finish_reason_name(FinishReason r);  // "length", "stop", "abort"; "" for none

struct TokenLogprobs {
  float logprob = 0;  // of the sampled token
  std::vector<std::pair<int32_t, float>> top;  // the N most likely, most likely first
};

// One sampled token of one request (or only its end, when aborted: token -1).
struct StepOutput {
  int64_t request = 0;
  int32_t token = -1;
  TokenLogprobs logprobs;  // filled when the request asked (logprobs >= 0)
  FinishReason finished = FinishReason::none;
};

}  // namespace unillm::infer
