// Fuzz target for the request bodies of `unillm serve` (serve::parse_request, src/serve/api.cpp):
// any bytes either parse into a request inside OpenAI's ranges or throw serve::ApiError with a
// 4xx status, never anything else. The first byte picks the endpoint (completions or chat). A
// response_format schema is compiled into a grammar, which then matches the body's own bytes.
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "infer/grammar.h"
#include "serve/api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace unillm;
  if (size < 1 || size > (1 << 16)) return 0;
  const auto endpoint = data[0] % 2 ? serve::Endpoint::chat : serve::Endpoint::completions;
  const std::string body(fuzz::bytes_of(data + 1, size - 1));
  serve::RequestLimits lim;
  lim.max_n = 16;
  lim.vocab_size = 512;
  serve::ParsedRequest r;
  try {
    r = serve::parse_request(body, endpoint, lim);
  } catch (const serve::ApiError& e) {
    fuzz::require(e.status >= 400 && e.status < 500, "a client error status");
    fuzz::require(std::string(e.what()).size() > 0, "an error message");
    return 0;
  }
  fuzz::require(r.n >= 1 && r.n <= lim.max_n, "n in [1, max_n]");
  fuzz::require(r.sampling.temperature >= 0 && r.sampling.temperature <= 2, "temperature in [0, 2]");
  fuzz::require(r.sampling.top_p > 0 && r.sampling.top_p <= 1, "top_p in (0, 1]");
  fuzz::require(r.sampling.top_k >= 0, "top_k >= 0");
  fuzz::require(r.sampling.repetition_penalty > 0, "repetition_penalty > 0");
  fuzz::require(r.logprobs >= -1 && r.logprobs <= 20, "logprobs in [-1, 20]");
  fuzz::require(r.max_tokens == -1 || r.max_tokens >= 1, "max_tokens unset or >= 1");
  for (const auto& s : r.stop) fuzz::require(!s.empty(), "no empty stop string");
  for (int32_t id : r.stop_token_ids) fuzz::require(id >= 0 && id < lim.vocab_size, "stop ids in the vocabulary");
  if (endpoint == serve::Endpoint::chat) {
    fuzz::require(r.messages.size() % 2 == 1, "an odd number of turns");
    for (size_t i = 0; i < r.messages.size(); ++i)
      fuzz::require((r.messages[i].role == data::Role::kUser) == (i % 2 == 0), "turns alternate from user");
  } else if (r.prompt_is_ids) {
    fuzz::require(!r.prompt_ids.empty(), "a prompt");
    for (int32_t id : r.prompt_ids) fuzz::require(id >= 0 && id < lim.vocab_size, "prompt ids in the vocabulary");
  } else {
    fuzz::require(!r.prompt.empty(), "a prompt");
  }
  if (r.grammar) {  // the matcher over arbitrary bytes: refusals leave the state as it was
    infer::GrammarMatcher m(r.grammar);
    for (char c : body) {
      const bool was_complete = m.complete();
      if (!m.accept(std::string_view(&c, 1))) {
        fuzz::require(m.complete() == was_complete, "a refused byte changes nothing");
        break;
      }
    }
  }
  return 0;
}
