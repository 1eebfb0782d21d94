// The HTTP side of `unillm serve`: routes, auth, limits, OpenAI response bodies and streaming.
#include "serve/server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "data/error.h"
#include "infer/stop_matcher.h"
#include "serve/api.h"
#include "serve/engine_loop.h"
#include "serve/metrics.h"
#include "serve/tool_reply.h"

namespace unillm::serve {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// One choice's text as it streams: detokenised, held back while it may start a stop string.
struct ChoiceState {
  ChoiceState(const io::Tokenizer& tok, std::vector<std::string> stop)
      : decoder(tok, /*skip_special_tokens=*/true), stops(std::move(stop)) {}
  io::StreamDecoder decoder;
  infer::StopMatcher stops;
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<infer::TokenLogprobs> logprobs;
  std::string finish;  // "" while running
  Clock::time_point last;
};

}  // namespace

struct Server::Impl {
  models::CausalLM& model;
  const io::Tokenizer& tok;
  const data::ChatTemplate* tmpl;
  std::vector<int32_t> eos;
  ServerConfig c;
  infer::Engine engine;
  EngineLoop loop;
  Metrics metrics;
  httplib::Server http;
  std::atomic<int64_t> next_id{1};
  std::mt19937_64 seeds{std::random_device{}()};
  std::mutex seed_mu;

  Impl(models::CausalLM& m, const io::Tokenizer& t, const data::ChatTemplate* ct,
       std::vector<int32_t> e, const infer::EngineConfig& ec, const ServerConfig& sc)
      : model(m), tok(t), tmpl(ct), eos(std::move(e)), c(sc), engine(m, ec), loop(engine, sc.max_queue) {
    // Structured output matches tokens by their bytes; ids the tokenizer lacks (a model vocabulary
    // padded beyond it) have none and are never sampled under a grammar.
    std::vector<std::string> bytes(static_cast<size_t>(m.config().vocab_size));
    for (size_t id = 0; id < bytes.size(); ++id) bytes[id] = t.token_bytes(static_cast<int32_t>(id));
    engine.set_vocabulary(std::move(bytes));
    routes();
  }

  // ---- one generation request, as the engine sees it
  struct Job {
    ParsedRequest p;
    std::string id, model_name;
    std::vector<int32_t> prompt;
    std::shared_ptr<Channel> ch;
    std::vector<ChoiceState> choices;
    Clock::time_point arrival;
    bool first_seen = false;
  };

  std::string resolve_model(const std::string& name) const {  // → adapter ("" = base)
    if (name.empty() || name == c.model_name) return "";
    for (const auto& a : c.adapters)
      if (a == name) return a;
    throw ApiError(404, "The model '" + name + "' does not exist", "model", "invalid_request_error",
                   "model_not_found");
  }

  std::vector<int32_t> encode_prompt(const ParsedRequest& p) const {
    if (p.endpoint == Endpoint::chat) {
      if (!tmpl) throw ApiError(400, "this model has no chat template: start the server with --template NAME", "messages");
      try {
        return tmpl->encode_prompt(p.messages, p.system.value_or(""), p.tools);
      } catch (const NotImplemented& e) {
        throw ApiError(400,
                       "the chat template '" + tmpl->name() +
                           "' has a tool format unillm does not implement: " + e.what(),
                       p.tools.empty() ? "messages" : "tools");
      } catch (const data::DataError& e) {
        throw ApiError(400, e.what(), p.tools.empty() ? "messages" : "tools");
      }
    }
    if (p.prompt_is_ids) return p.prompt_ids;
    auto ids = tok.encode(p.prompt);
    if (ids.empty()) throw ApiError(400, "the prompt encodes to no tokens", "prompt");
    return ids;
  }

  std::unique_ptr<Job> start(const httplib::Request& req, Endpoint ep) {
    auto job = std::make_unique<Job>();
    job->arrival = Clock::now();
    RequestLimits lim;
    lim.max_n = c.max_n;
    lim.vocab_size = model.config().vocab_size;
    job->p = parse_request(req.body, ep, lim);
    const ParsedRequest& p = job->p;
    const std::string adapter = resolve_model(p.model);
    job->model_name = p.model.empty() ? c.model_name : p.model;
    job->prompt = encode_prompt(p);
    if (p.force_tool_call) job->p.grammar = forced_call_grammar(tmpl->def(), p.tools, p.forced_tool);
    const auto P = static_cast<int64_t>(job->prompt.size());
    const char* param = ep == Endpoint::chat ? "messages" : "prompt";
    if (P >= c.max_model_len)
      throw ApiError(400, "This model's maximum context length is " + std::to_string(c.max_model_len) +
                     " tokens; the prompt has " + std::to_string(P), param, "invalid_request_error",
                     "context_length_exceeded");
    const int64_t max_tokens = p.max_tokens < 0 ? c.max_model_len - P : p.max_tokens;
    if (P + max_tokens > c.max_model_len)
      throw ApiError(400, "This model's maximum context length is " + std::to_string(c.max_model_len) +
                     " tokens; the prompt has " + std::to_string(P) + " and " + std::to_string(max_tokens) +
                     " were requested", "max_tokens", "invalid_request_error", "context_length_exceeded");
    std::vector<int32_t> stop_ids = p.stop_token_ids;
    if (!p.ignore_eos) {
      const auto& ends = ep == Endpoint::chat ? tmpl->stop_ids() : eos;
      stop_ids.insert(stop_ids.end(), ends.begin(), ends.end());
    }
    uint64_t base_seed;
    {
      std::lock_guard<std::mutex> lock(seed_mu);
      base_seed = p.seed ? *p.seed : seeds();
    }
    std::vector<infer::Request> reqs;
    for (int i = 0; i < p.n; ++i) {
      infer::Request r;
      r.prompt = job->prompt;
      r.sampling = p.sampling;
      r.seed = base_seed + static_cast<uint64_t>(i);
      r.max_tokens = max_tokens;
      r.stop_ids = stop_ids;
      r.logprobs = p.logprobs;
      r.adapter = adapter;
      r.grammar = p.grammar;
      reqs.push_back(std::move(r));
      job->choices.emplace_back(tok, p.stop);
      job->choices.back().last = job->arrival;
    }
    try {
      job->ch = loop.submit(std::move(reqs));
    } catch (const ConfigError& e) {
      throw ApiError(400, e.what());
    }
    if (!job->ch) throw ApiError(503, "the server is busy: too many waiting requests; retry later", "", "server_error");
    const char* prefix = ep == Endpoint::chat ? "chatcmpl-" : "cmpl-";
    job->id = prefix + std::to_string(unix_time()) + "-" + std::to_string(next_id++);
    return job;
  }

  // Applies one engine event to its choice; returns the text it adds (may be empty).
  std::string apply(Job& job, const infer::StepOutput& e) {
    const int i = job.ch->choice(e.request);
    if (i < 0) return "";
    ChoiceState& s = job.choices[i];
    if (!s.finish.empty()) return "";
    std::string delta;
    const auto now = Clock::now();
    if (e.token >= 0) {
      if (!job.first_seen) {
        metrics.first_token(std::chrono::duration<double>(now - job.arrival).count());
        job.first_seen = true;
      } else if (!s.tokens.empty()) {
        metrics.inter_token(std::chrono::duration<double>(now - s.last).count());
      }
      s.last = now;
      s.tokens.push_back(e.token);
      if (job.p.logprobs >= 0) s.logprobs.push_back(e.logprobs);
      delta = s.stops.push(s.decoder.push(e.token));
      if (s.stops.stopped()) {
        s.finish = "stop";
        if (e.finished == infer::FinishReason::none) loop.finish(e.request, infer::FinishReason::stop);
      }
    }
    if (s.finish.empty() && e.finished != infer::FinishReason::none) {
      delta += s.stops.push(s.decoder.finish());
      if (!s.stops.stopped()) delta += s.stops.flush();
      s.finish = e.finished == infer::FinishReason::length ? "length" : "stop";
    }
    s.text += delta;
    return delta;
  }

  bool all_done(const Job& job) const {
    for (const auto& s : job.choices)
      if (s.finish.empty()) return false;
    return true;
  }

  // Waits for the next events (or the end); false when the engine failed the request.
  std::vector<infer::StepOutput> next_events(Job& job, std::string& error) {
    std::unique_lock<std::mutex> lock(job.ch->mu);
    job.ch->cv.wait_for(lock, std::chrono::milliseconds(200), [&] {
      return !job.ch->events.empty() || job.ch->open == 0 || !job.ch->error.empty();
    });
    std::vector<infer::StepOutput> out(job.ch->events.begin(), job.ch->events.end());
    job.ch->events.clear();
    error = job.ch->error;
    return out;
  }

  json logprobs_json(const Job& job, const ChoiceState& s) const {
    if (job.p.logprobs < 0) return nullptr;
    auto piece = [&](int32_t id) { return tok.decode({id}, false); };
    if (job.p.endpoint == Endpoint::chat) {
      json content = json::array();
      for (size_t t = 0; t < s.logprobs.size(); ++t) {
        json top = json::array();
        for (const auto& [id, lp] : s.logprobs[t].top) top.push_back({{"token", piece(id)}, {"logprob", lp}});
        content.push_back({{"token", piece(s.tokens[t])}, {"logprob", s.logprobs[t].logprob}, {"top_logprobs", top}});
      }
      return {{"content", content}};
    }
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    size_t offset = 0;
    for (size_t t = 0; t < s.logprobs.size(); ++t) {
      const std::string text = piece(s.tokens[t]);
      tokens.push_back(text);
      lps.push_back(s.logprobs[t].logprob);
      json top = json::object();
      for (const auto& [id, lp] : s.logprobs[t].top) top[piece(id)] = lp;
      tops.push_back(top);
      offsets.push_back(offset);
      offset += text.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  json usage(const Job& job) const {
    int64_t gen = 0;
    for (const auto& s : job.choices) gen += static_cast<int64_t>(s.tokens.size());
    const auto P = static_cast<int64_t>(job.prompt.size());
    return {{"prompt_tokens", P}, {"completion_tokens", gen}, {"total_tokens", P + gen}};
  }

  void finish_metrics(const Job& job) {
    int64_t gen = 0;
    for (const auto& s : job.choices) gen += static_cast<int64_t>(s.tokens.size());
    metrics.tokens(static_cast<int64_t>(job.prompt.size()), gen);
  }

  void respond_whole(Job& job, httplib::Response& res) {
    std::string error;
    while (!all_done(job)) {
      for (const auto& e : next_events(job, error)) apply(job, e);
      if (!error.empty()) throw ApiError(500, error, "", "server_error");
    }
    json choices = json::array();
    for (size_t i = 0; i < job.choices.size(); ++i) {
      const ChoiceState& s = job.choices[i];
      json ch = {{"index", i}, {"logprobs", logprobs_json(job, s)}, {"finish_reason", s.finish}};
      if (job.p.endpoint == Endpoint::chat)
        ch["message"] = chat_message(job, s, ch["finish_reason"]);
      else
        ch["text"] = s.text;
      choices.push_back(ch);
    }
    json body = {{"id", job.id},
                 {"object", job.p.endpoint == Endpoint::chat ? "chat.completion" : "text_completion"},
                 {"created", unix_time()}, {"model", job.model_name}, {"choices", choices},
                 {"usage", usage(job)}};
    finish_metrics(job);
    res.set_content(body.dump(), "application/json");
  }

  // A finished chat choice's message: with tools rendered, the reply read as tool calls when the
  // template's extractor finds some (finish_reason becomes "tool_calls").
  json chat_message(const Job& job, const ChoiceState& s, json& finish_reason) const {
    if (job.p.tools.empty()) return {{"role", "assistant"}, {"content", s.text}};
    bool called = false;
    json m;
    try {
      m = tool_call_message(tmpl->def(), s.text, &called);
    } catch (const NotImplemented&) {  // encode_prompt refuses these first; kept for safety
      m = {{"role", "assistant"}, {"content", s.text}};
    }
    if (called) finish_reason = "tool_calls";
    return m;
  }

  json chunk(const Job& job, json choices) const {
    return {{"id", job.id},
            {"object", job.p.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", unix_time()}, {"model", job.model_name}, {"choices", std::move(choices)}};
  }

  void respond_stream(std::shared_ptr<Job> job, httplib::Response& res) {
    auto sent_role = std::make_shared<std::vector<bool>>(job->choices.size(), false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, sent_role](size_t, httplib::DataSink& sink) {
          auto send = [&](const json& j) {
            const std::string line = "data: " + j.dump() + "\n\n";
            return sink.write(line.data(), line.size());
          };
          const bool chat = job->p.endpoint == Endpoint::chat;
          for (size_t i = 0; chat && i < sent_role->size(); ++i)
            if (!(*sent_role)[i]) {
              (*sent_role)[i] = true;
              if (!send(chunk(*job, json::array({{{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                                  {"logprobs", nullptr}, {"finish_reason", nullptr}}}))))
                return false;
            }
          std::string error;
          for (const auto& e : next_events(*job, error)) {
            const int i = job->ch->choice(e.request);
            if (i < 0 || !job->choices[i].finish.empty()) continue;
            ChoiceState& s = job->choices[i];
            const size_t lp_before = s.logprobs.size();
            const std::string delta = apply(*job, e);
            if (chat && !job->p.tools.empty()) {
              // With tools the reply may be a call: held back, then sent whole in one delta
              // (tool_calls, or the text when it is not a call) with its finish_reason.
              if (s.finish.empty()) continue;
              json fr = s.finish;
              json m = chat_message(*job, s, fr);
              json d = json::object();
              if (m.contains("tool_calls")) {
                json calls = m["tool_calls"];
                for (size_t k = 0; k < calls.size(); ++k) calls[k]["index"] = k;
                d["tool_calls"] = calls;
              } else if (!s.text.empty()) {
                d["content"] = s.text;
              }
              if (!send(chunk(*job, json::array({{{"index", i},
                                                  {"delta", d},
                                                  {"logprobs", logprobs_json(*job, s)},
                                                  {"finish_reason", fr}}}))))
                return false;
              continue;
            }
            json c = {{"index", i}, {"finish_reason", s.finish.empty() ? json(nullptr) : json(s.finish)}};
            json lp = nullptr;
            if (job->p.logprobs >= 0 && s.logprobs.size() > lp_before) {
              ChoiceState part(tok, {});
              part.tokens.assign(s.tokens.end() - 1, s.tokens.end());
              part.logprobs.assign(s.logprobs.end() - 1, s.logprobs.end());
              lp = logprobs_json(*job, part);
            }
            c["logprobs"] = lp;
            if (chat)
              c["delta"] = delta.empty() ? json::object() : json{{"content", delta}};
            else
              c["text"] = delta;
            if (delta.empty() && s.finish.empty() && lp.is_null()) continue;  // nothing to say
            if (!send(chunk(*job, json::array({c})))) return false;
          }
          if (!error.empty()) {
            const std::string line = "data: " + error_body(ApiError(500, error, "", "server_error")) + "\n\n";
            sink.write(line.data(), line.size());
            for (auto& s : job->choices) s.finish = "abort";
          }
          if (!all_done(*job)) return true;  // called again
          if (job->p.include_usage) {
            json u = chunk(*job, json::array());
            u["usage"] = usage(*job);
            if (!send(u)) return false;
          }
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          finish_metrics(*job);
          sink.done();
          return true;
        },
        [this, job](bool) {
          if (!all_done(*job)) loop.cancel(job->ch);  // the client went away: free its blocks
        });
  }

  void generate(const httplib::Request& req, httplib::Response& res, Endpoint ep) {
    std::shared_ptr<Job> job;
    try {
      job = start(req, ep);
      if (job->p.stream) {
        respond_stream(job, res);
      } else {
        respond_whole(*job, res);
      }
    } catch (const ApiError& e) {
      if (job && job->ch) loop.cancel(job->ch);
      send_error(res, e);
    }
  }

  bool authorized(const httplib::Request& req) const {
    return c.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + c.api_key;
  }

  int listen_fd = -1;

  void routes() {
    // httplib listens with a backlog of 5 (compiled into Debian's library): a burst of clients
    // overflows it while the accept thread waits for a core, and the kernel then drops
    // half-open connections (clients saw read errors). Keep the default socket options, note the
    // listening socket, and raise its backlog after bind (Linux applies a repeated listen()).
    http.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = static_cast<int>(sock);
    });
    http.new_task_queue = [n = c.http_threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    http.set_payload_max_length(c.max_body_bytes);
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const bool open = req.path == "/health" || req.path == "/metrics";
      if (open || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, ApiError(401, "a valid API key is required: Authorization: Bearer <key>", "",
                               "invalid_request_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string msg = "HTTP " + std::to_string(res.status);
      if (res.status == 404) msg = "no route for " + req.method + " " + req.path;
      if (res.status == 413) msg = "the request body is larger than " + std::to_string(c.max_body_bytes) + " bytes";
      if (res.status == 405) msg = req.method + " is not allowed on " + req.path;
      send_error(res, ApiError(res.status, msg));
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, what, "", "server_error"));
    });
    http.set_logger([this](const httplib::Request&, const httplib::Response& res) { metrics.request_done(res.status); });
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{}", "application/json"); });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.text(loop.stats()), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json data = json::array();
      const int64_t t = unix_time();
      data.push_back({{"id", c.model_name}, {"object", "model"}, {"created", t}, {"owned_by", "unillm"},
                      {"max_model_len", c.max_model_len}});
      for (const auto& a : c.adapters)
        data.push_back({{"id", a}, {"object", "model"}, {"created", t}, {"owned_by", "unillm"},
                        {"parent", c.model_name}, {"max_model_len", c.max_model_len}});
      res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, Endpoint::completions);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, Endpoint::chat);
    });
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        const json j = json::parse(req.body, nullptr, false);
        if (j.is_discarded() || !j.is_object()) throw ApiError(400, "the body must be a JSON object");
        ParsedRequest p;
        if (j.contains("messages")) {
          json chat = j;
          chat.erase("model");
          p = parse_request(chat.dump(), Endpoint::chat, {c.max_n, model.config().vocab_size});
        } else {
          p = parse_request(j.dump(), Endpoint::completions, {c.max_n, model.config().vocab_size});
        }
        const auto ids = encode_prompt(p);
        res.set_content(json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", c.max_model_len}}.dump(),
                        "application/json");
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
  }
};

Server::Server(models::CausalLM& model, const io::Tokenizer& tokenizer,
               const data::ChatTemplate* chat_template, std::vector<int32_t> eos_ids,
               const infer::EngineConfig& engine, const ServerConfig& config)
    : impl_(std::make_unique<Impl>(model, tokenizer, chat_template, std::move(eos_ids), engine, config)) {}

Server::~Server() { stop(); }

int Server::listen_port() {
  const int port = impl_->c.port == 0 ? impl_->http.bind_to_any_port(impl_->c.host)
                                      : (impl_->http.bind_to_port(impl_->c.host, impl_->c.port) ? impl_->c.port : -1);
  if (port < 0)
    UNILLM_THROW(IoError, "[serve] cannot listen on ", impl_->c.host, ":", impl_->c.port,
                 " (in use, or not an address of this machine)");
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, 1024);
  return port;
}

void Server::serve() {
  impl_->loop.start();
  impl_->http.listen_after_bind();
  impl_->loop.stop();  // aborts what still runs, joins the engine thread
}

void Server::stop() {
  if (!impl_) return;
  impl_->loop.stop();  // aborts every request first, so open streams end and workers free up
  impl_->http.stop();
}

}  // namespace unillm::serve
