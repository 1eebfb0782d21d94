// The OpenAI-compatible request bodies `unillm serve` accepts, parsed and validated into one
// plain struct before anything reaches the engine, and the error bodies it answers with
// (`{"error": {"message", "type", "param", "code"}}`). Pure functions of their input: the fuzz
// target (tests/fuzz) drives parse_request with arbitrary bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/template.h"
#include "infer/request.h"
#include "infer/sampler.h"

namespace unillm::serve {

// A request the server refuses: HTTP status, OpenAI error type, the offending parameter.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error", std::string code = "")
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type, param, code;
};
// The JSON error body of e.
std::string error_body(const ApiError& e);

enum class Endpoint { completions, chat };

struct ParsedRequest {
  Endpoint endpoint = Endpoint::completions;
  std::string model;  // "" = the default (served) model
  // completions: the prompt as text or as token ids (prompt_is_ids)
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  // chat: the system prompt (first message, if a system one) and the turns after it. A "tool"
  // message is a kObservation; an assistant message with tool_calls a kFunction whose content is
  // the JSON list of its calls, [{"name", "arguments"}] (LLaMA-Factory's api/chat.py).
  std::optional<std::string> system;
  std::vector<data::Message> messages;
  // chat: the `tools` as the template's tools JSON, [{"name", "description", "parameters"}]
  // (LLaMA-Factory's list of tool.function); "" when none were given or tool_choice is "none".
  std::string tools;
  // chat: tool_choice "required" (force_tool_call, forced_tool "") or a named function
  // (forced_tool its name): the reply is constrained to a call (tool_reply.h's
  // forced_call_grammar, built once the template is known).
  bool force_tool_call = false;
  std::string forced_tool;
  int64_t max_tokens = -1;  // -1: up to the model's length limit
  int n = 1;
  infer::SamplingParams sampling;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool stream = false, include_usage = false;
  int logprobs = -1;  // completions: 0..5; chat: top_logprobs (0..20) when logprobs is true
  // response_format json_object / json_schema, compiled; null for text.
  std::shared_ptr<const infer::Grammar> grammar;
};

struct RequestLimits {
  int max_n = 16;
  int64_t vocab_size = 0;  // token ids must be below it (0: unchecked)
};

// Parses a /v1/completions or /v1/chat/completions body. Throws ApiError (400 for malformed JSON
// or a bad value, naming the parameter) and never anything else for any input.
ParsedRequest parse_request(const std::string& body, Endpoint endpoint, const RequestLimits& limits);

}  // namespace unillm::serve
