// `unillm serve`: an OpenAI-compatible HTTP API (cpp-httplib) in front of the engine thread
// (engine_loop.h). HTTP worker threads parse, validate, queue and stream; they never call a
// kernel. Endpoints: GET /health, GET /v1/models, POST /v1/completions, POST
// /v1/chat/completions, POST /tokenize, GET /metrics (docs/serving.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/template.h"
#include "infer/engine.h"
#include "io/tokenizer.h"
#include "models/causal_lm.h"

namespace unillm::serve {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (listen_port() says which)
  std::string api_key;  // non-empty: /v1/* and /tokenize need "Authorization: Bearer <key>"
  std::string model_name;  // the base model's name in "model"
  std::vector<std::string> adapters;  // loaded adapters, each also a model name
  int64_t max_model_len = 0;  // prompt + max_tokens cap
  int64_t max_queue = 256;  // waiting sequences beyond which requests get 503
  size_t max_body_bytes = 4u << 20;
  int http_threads = 36;  // every open stream holds one: at least max_num_seqs + 4
  int max_n = 16;
};

class Server {
 public:
  // chat_template may be null (then /v1/chat/completions answers 400). eos_ids end a completion;
  // the template's stop ids end a chat turn.
  Server(models::CausalLM& model, const io::Tokenizer& tokenizer,
         const data::ChatTemplate* chat_template, std::vector<int32_t> eos_ids,
         const infer::EngineConfig& engine, const ServerConfig& config);
  ~Server();
  // Binds the socket; returns the port. Throws IoError when it cannot.
  int listen_port();
  // Serves until stop(); then aborts what still runs and returns.
  void serve();
  // Stops accepting and ends serve() (any thread).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace unillm::serve
