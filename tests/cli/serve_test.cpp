// `unillm serve` end to end: a real server process on a loopback port, spoken to over HTTP
// (cpp-httplib's client). Greedy completions equal `unillm generate`; chat, streaming (SSE with
// [DONE] and usage), n > 1 with a seed, logprobs; tools rendered as the template renders them, a
// reply that is a call answered as tool_calls, and their errors; OpenAI-style errors with the
// right status; a client that leaves mid-stream frees its blocks; SIGTERM ends the server with
// exit code 0.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "data/template.h"
#include "io/tokenizer.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm::testing {
namespace {

using nlohmann::json;
const std::string kModel = source_path("assets/stories260K");

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
const std::string kKey = "test-key";

// A `unillm serve` child on 127.0.0.1 with a free port; killed (SIGKILL) if still alive at the
// end of the test, whatever happened.
class ServerProcess {
 public:
  // head: the command and what selects the model (default `serve --model` the bundled one).
  explicit ServerProcess(const std::string& flags, const std::string& head = "") {
    log_ = temp_dir("serve") + "/stderr.txt";
    pid_ = fork();
    if (pid_ == 0) {
      const std::string cmd = std::string(UNILLM_BINARY_DIR) + "/unillm " +
                              (head.empty() ? "serve --model " + shell_quote(kModel) : head) +
                              " --port 0 --threads 1 " + flags + " 2>" + shell_quote(log_);
      execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    const std::regex re("listening on http://127\\.0\\.0\\.1:(\\d+)");
    while (std::chrono::steady_clock::now() < deadline && port_ == 0) {
      std::smatch m;
      const std::string text = read_log();
      if (std::regex_search(text, m, re)) port_ = std::stoi(m[1]);
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string read_log() const { return read_file(log_); }
  // SIGTERM, then the exit code (-1 when it did not exit within the timeout).
  int terminate(int timeout_s = 30) {
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_;
};

struct Api {
  httplib::Client cli;
  explicit Api(int port) : cli("127.0.0.1", port) {
    cli.set_read_timeout(60, 0);
    cli.set_default_headers({{"Authorization", "Bearer " + kKey}});
  }
  std::pair<int, json> post(const std::string& path, const std::string& body) {
    auto r = cli.Post(path.c_str(), body, "application/json");
    if (!r) return {-1, json()};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  std::pair<int, json> get(const std::string& path) {
    auto r = cli.Get(path.c_str());
    if (!r) return {-1, json()};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  // Server-sent events of a streamed request: the data payloads, in order.
  std::vector<std::string> stream(const std::string& path, const json& body, int stop_after = -1) {
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = {{"Authorization", "Bearer " + kKey}, {"Content-Type", "application/json"}};
    req.body = body.dump();
    std::string buf;
    std::vector<std::string> events;
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      buf.append(d, n);
      for (size_t at; (at = buf.find("\n\n")) != std::string::npos;) {
        const std::string ev = buf.substr(0, at);
        buf.erase(0, at + 2);
        if (ev.rfind("data: ", 0) == 0) events.push_back(ev.substr(6));
      }
      return stop_after < 0 || static_cast<int>(events.size()) < stop_after;
    };
    httplib::Response res;
    httplib::Error err;
    cli.send(req, res, err);
    return events;
  }
};

std::string ids_text(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

const std::vector<int> kPrompt = {1, 403, 407, 261, 378, 260, 266, 292, 284, 343};

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess("--api-key " + kKey + " --template alpaca --max-num-seqs 8 --served-model-name tiny");
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static ServerProcess* server_;
};
ServerProcess* Serve::server_ = nullptr;

TEST_F(Serve, ModelsAndHealth) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  auto [st, models] = api.get("/v1/models");
  ASSERT_EQ(st, 200);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(api.get("/health").first, 200);
}

TEST_F(Serve, GreedyCompletionEqualsGenerate) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  json body = {{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 12}, {"temperature", 0},
               {"ignore_eos", true}};
  auto [st, r] = api.post("/v1/completions", body.dump());
  ASSERT_EQ(st, 200) << r.dump();
  auto g = run_unillm("generate --model " + shell_quote(kModel) + " --prompt-ids " + ids_text(kPrompt) +
                      " --max-new-tokens 12 --temperature 0 --ignore-eos --quiet --threads 1");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(r["choices"][0]["text"].get<std::string>() + "\n", g.out);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], kPrompt.size());
  EXPECT_EQ(r["usage"]["completion_tokens"], 12);
  EXPECT_EQ(r["object"], "text_completion");
}

TEST_F(Serve, StreamingGivesTheSameTextThenUsageAndDone) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  json body = {{"prompt", kPrompt}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
  auto [st, whole] = api.post("/v1/completions", body.dump());
  ASSERT_EQ(st, 200);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto events = api.stream("/v1/completions", body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) text += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, whole["choices"][0]["text"].get<std::string>());
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 10);
  EXPECT_TRUE(usage["choices"].empty());
}

TEST_F(Serve, ChatCompletionAndChatStream) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  json body = {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Tell me a story."}}}},
               {"max_completion_tokens", 8}, {"temperature", 0}};
  auto [st, r] = api.post("/v1/chat/completions", body.dump());
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  const std::string text = r["choices"][0]["message"]["content"];
  body["stream"] = true;
  auto events = api.stream("/v1/chat/completions", body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[0])["choices"][0]["delta"]["role"], "assistant");
  std::string streamed;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    const json d = json::parse(events[i])["choices"][0]["delta"];
    if (d.contains("content")) streamed += d["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);
}

TEST_F(Serve, SeededSamplingWithNChoicesIsRepeatable) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  json body = {{"prompt", kPrompt}, {"max_tokens", 12}, {"n", 3}, {"seed", 7}, {"temperature", 1.0},
               {"ignore_eos", true}, {"logprobs", 2}};
  auto [s1, a] = api.post("/v1/completions", body.dump());
  auto [s2, b] = api.post("/v1/completions", body.dump());
  ASSERT_EQ(s1, 200) << a.dump();
  ASSERT_EQ(a["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a["choices"][i]["text"], b["choices"][i]["text"]) << i;
  EXPECT_NE(a["choices"][0]["text"], a["choices"][1]["text"]) << "different seeds per choice";
  const json lp = a["choices"][0]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), 12u);
  EXPECT_LE(lp["top_logprobs"][0].size(), 2u);
  for (const auto& v : lp["token_logprobs"]) EXPECT_LE(v.get<double>(), 0.0);
  EXPECT_EQ(a["usage"]["completion_tokens"], 36);
}

// response_format: every choice is JSON that satisfies the schema (checked field by field here),
// and ends with finish_reason "stop" once the grammar admits nothing more.
TEST_F(Serve, StructuredOutputFollowsTheSchema) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  const json schema = json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3},
      "pet": {"type": ["string", "null"], "maxLength": 8}
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": false})");
  json body = {{"messages", {{{"role", "user"}, {"content", "Describe a person."}}}},
               {"max_completion_tokens", 400}, {"temperature", 1.0}, {"seed", 3}, {"n", 4},
               {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", schema}, {"strict", true}}}}}};
  auto [st, r] = api.post("/v1/chat/completions", body.dump());
  ASSERT_EQ(st, 200) << r.dump();
  for (const json& c : r["choices"]) {
    const std::string text = c["message"]["content"];
    SCOPED_TRACE(text);
    EXPECT_EQ(c["finish_reason"], "stop");
    const json v = json::parse(text, nullptr, false);
    ASSERT_TRUE(v.is_object());
    for (const auto& [key, val] : v.items()) EXPECT_TRUE(schema["properties"].contains(key)) << key;
    ASSERT_TRUE(v.contains("name") && v.contains("age") && v.contains("tags"));
    EXPECT_TRUE(v["name"].is_string());
    EXPECT_LE(v["name"].get<std::string>().size(), 12u * 4);  // characters, not bytes
    ASSERT_TRUE(v["age"].is_number_integer());
    EXPECT_GE(v["age"].get<int64_t>(), 0);
    EXPECT_LE(v["age"].get<int64_t>(), 150);
    ASSERT_TRUE(v["tags"].is_array());
    EXPECT_LE(v["tags"].size(), 3u);
    for (const json& t : v["tags"]) EXPECT_TRUE(t == "red" || t == "green") << t;
    if (v.contains("pet")) {
      EXPECT_TRUE(v["pet"].is_null() || v["pet"].is_string());
    }
  }
  // json_object: any JSON object, streamed the same way.
  body = {{"prompt", kPrompt}, {"max_tokens", 300}, {"temperature", 0.8}, {"seed", 11},
          {"response_format", {{"type", "json_object"}}}};
  auto [st2, o] = api.post("/v1/completions", body.dump());
  ASSERT_EQ(st2, 200) << o.dump();
  const std::string text = o["choices"][0]["text"];
  if (o["choices"][0]["finish_reason"] == "stop") {
    EXPECT_TRUE(json::parse(text, nullptr, false).is_object()) << text;
  } else {  // cut by max_tokens: still a prefix of an object
    EXPECT_EQ(text.substr(0, 1), "{") << text;
  }
  // A schema with an unsupported keyword is a 400 naming it.
  body["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"pattern", "^a+$"}}}}}};
  auto [st3, e] = api.post("/v1/completions", body.dump());
  EXPECT_EQ(st3, 400) << e.dump();
  EXPECT_EQ(e["error"]["param"], "response_format.json_schema.schema");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("pattern"), std::string::npos) << e.dump();
}

TEST_F(Serve, BadRequestsGetOpenAiErrors) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  auto expect = [&](const std::string& path, const std::string& body, int status, const std::string& param) {
    auto [st, r] = api.post(path, body);
    EXPECT_EQ(st, status) << body << " -> " << r.dump();
    ASSERT_TRUE(r.contains("error")) << r.dump();
    EXPECT_TRUE(r["error"]["message"].is_string());
    if (!param.empty()) {
      EXPECT_EQ(r["error"]["param"], param) << r.dump();
    }
  };
  expect("/v1/completions", "{not json", 400, "");
  expect("/v1/completions", R"({"prompt": "hi", "temperature": 5})", 400, "temperature");
  expect("/v1/completions", R"({"prompt": [1, 99999]})", 400, "prompt");
  expect("/v1/completions", R"({"prompt": "hi", "model": "gpt-4"})", 404, "model");
  expect("/v1/completions", R"({"prompt": "hi", "max_tokens": 100000})", 400, "max_tokens");
  expect("/v1/chat/completions", R"({"messages": [{"role": "assistant", "content": "x"}]})", 400, "messages[0].role");
  expect("/v1/nothing", "{}", 404, "");
  expect("/v1/completions", std::string(5 << 20, ' '), 413, "");
  httplib::Client anon("127.0.0.1", server_->port());
  auto r = anon.Post("/v1/completions", R"({"prompt": "hi"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(api.get("/health").first, 200) << "still alive";
}

TEST_F(Serve, ClientLeavingMidStreamFreesItsBlocks) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  json body = {{"prompt", kPrompt}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true}};
  auto events = api.stream("/v1/completions", body, 2);  // hang up after two events
  EXPECT_EQ(events.size(), 2u);
  std::string metrics;
  for (int i = 0; i < 100; ++i) {  // up to 10 s for the engine to notice
    auto m = api.cli.Get("/metrics");
    ASSERT_TRUE(m);
    metrics = m->body;
    if (metrics.find("unillm_num_requests_running 0\n") != std::string::npos &&
        metrics.find("unillm_kv_blocks{state=\"used\"} 0\n") != std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(metrics.find("unillm_num_requests_running 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("unillm_kv_blocks{state=\"used\"} 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("unillm_time_to_first_token_seconds_count"), std::string::npos);
}

TEST_F(Serve, StopStringsEndTheTextBeforeThem) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  json body = {{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  auto [st, whole] = api.post("/v1/completions", body.dump());
  ASSERT_EQ(st, 200);
  const std::string text = whole["choices"][0]["text"];
  ASSERT_GT(text.size(), 12u);
  const std::string stop = text.substr(text.size() / 2, 3);
  body["stop"] = {stop, "never-in-the-text"};
  auto [st2, cut] = api.post("/v1/completions", body.dump());
  ASSERT_EQ(st2, 200);
  EXPECT_EQ(cut["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  body["stream"] = true;  // the same through a stream
  std::string streamed;
  for (const auto& e : api.stream("/v1/completions", body))
    if (e != "[DONE]") streamed += json::parse(e)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, text.substr(0, text.find(stop)));
}

// Tools, an assistant tool call and a tool result render as LLaMA-Factory's api/chat.py hands
// them to its template: tools as the list of each tool's function, the call as a function
// message holding [{"name", "arguments"}], the result as an observation. The expected ids come
// from the template layer given those strings written out by hand.
TEST_F(Serve, ToolRequestsRenderThroughTheTemplate) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Get the weather", "parameters": {"type": "object", "properties":
      {"city": {"type": "string", "description": "The city"}}, "required": ["city"]}}}])");
  const json messages = json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}])");
  const std::string lf_tools =
      R"([{"name": "get_weather", "description": "Get the weather", "parameters": {"type": "object", )"
      R"("properties": {"city": {"type": "string", "description": "The city"}}, "required": ["city"]}}])";
  const std::vector<data::Message> lf_messages = {
      {data::Role::kUser, "Weather in Paris?"},
      {data::Role::kFunction, R"([{"name": "get_weather", "arguments": {"city": "Paris"}}])"},
      {data::Role::kObservation, "sunny, 21 C"}};
  auto tok = io::Tokenizer::load(kModel);
  auto tmpl = data::ChatTemplate::by_name("alpaca", *tok);
  const auto want = tmpl->encode_prompt(lf_messages, "Be brief.", lf_tools);
  const auto want_no_tools = tmpl->encode_prompt(lf_messages, "Be brief.", "");
  ASSERT_NE(want, want_no_tools);
  EXPECT_NE(tok->decode(want, false).find("get_weather"), std::string::npos);

  json body = {{"messages", messages}, {"tools", tools}};
  auto [st, t] = api.post("/tokenize", body.dump());
  ASSERT_EQ(st, 200) << t.dump();
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), want);
  body["max_completion_tokens"] = 2;
  body["temperature"] = 0;
  auto [st2, r] = api.post("/v1/chat/completions", body.dump());
  ASSERT_EQ(st2, 200) << r.dump();
  EXPECT_EQ(r["usage"]["prompt_tokens"], want.size());
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  // The story model does not call tools: its text stays content.
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_string()) << r.dump();
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));

  // tool_choice "none" leaves the tools out of the prompt; "auto" is the default.
  body["tool_choice"] = "none";
  auto [st3, none] = api.post("/tokenize", body.dump());
  ASSERT_EQ(st3, 200) << none.dump();
  EXPECT_EQ(none["tokens"].get<std::vector<int32_t>>(), want_no_tools);
  body["tool_choice"] = "auto";
  EXPECT_EQ(api.post("/tokenize", body.dump()).second["tokens"].get<std::vector<int32_t>>(), want);
}

// tool_choice "required" / a named function: under alpaca (the default tool format) the story
// model is made to write "Action: NAME\nAction Input: ARGS" with arguments from the tool's
// schema, which comes back as tool_calls.
TEST_F(Serve, ForcedToolCallsFollowTheToolSchema) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  const json tools = json::parse(R"([
      {"type": "function", "function": {"name": "pick", "parameters": {"type": "object",
       "properties": {"color": {"enum": ["red", "blue"]}}, "required": ["color"]}}},
      {"type": "function", "function": {"name": "flip", "parameters": {"type": "object",
       "properties": {"heads": {"type": "boolean"}}, "required": ["heads"]}}}])");
  json body = {{"messages", {{{"role", "user"}, {"content", "Pick a color."}}}}, {"tools", tools},
               {"tool_choice", "required"}, {"max_completion_tokens", 60}, {"temperature", 0}};
  for (const json& choice : {json("required"), json::parse(R"({"type": "function", "function": {"name": "flip"}})")}) {
    body["tool_choice"] = choice;
    auto [st, r] = api.post("/v1/chat/completions", body.dump());
    ASSERT_EQ(st, 200) << r.dump();
    const json& c = r["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls") << r.dump();
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.dump();
    const json f = c["message"]["tool_calls"][0]["function"];
    const json args = json::parse(f["arguments"].get<std::string>());
    if (choice.is_object()) {
      EXPECT_EQ(f["name"], "flip") << r.dump();
    }
    if (f["name"] == "pick") {
      EXPECT_TRUE(args["color"] == "red" || args["color"] == "blue") << r.dump();
    } else {
      EXPECT_TRUE(args["heads"].is_boolean()) << r.dump();
    }
  }
}

// With tools the stream holds the reply back and sends it as one delta with its finish_reason:
// the same text as the whole response.
TEST_F(Serve, ToolRequestStreamsTheReplyInOneDelta) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
               {"tools", json::parse(R"([{"type": "function", "function": {"name": "f"}}])")},
               {"max_completion_tokens", 8}, {"temperature", 0}};
  auto [st, whole] = api.post("/v1/chat/completions", body.dump());
  ASSERT_EQ(st, 200) << whole.dump();
  body["stream"] = true;
  auto events = api.stream("/v1/chat/completions", body);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(json::parse(events[0])["choices"][0]["delta"]["role"], "assistant");
  const json c = json::parse(events[1])["choices"][0];
  EXPECT_EQ(c["delta"]["content"], whole["choices"][0]["message"]["content"]);
  EXPECT_EQ(c["finish_reason"], whole["choices"][0]["finish_reason"]);
  EXPECT_EQ(events[2], "[DONE]");
}

TEST_F(Serve, BadToolRequestsGetClearErrors) {
  ASSERT_GT(server_->port(), 0) << server_->read_log();
  Api api(server_->port());
  auto expect = [&](const std::string& extra, const std::string& param, const std::string& words) {
    const std::string body = R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}";
    auto [st, r] = api.post("/v1/chat/completions", body);
    EXPECT_EQ(st, 400) << body << " -> " << r.dump();
    EXPECT_EQ(r["error"]["param"], param) << body << " -> " << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find(words), std::string::npos) << r.dump();
  };
  const std::string tool = R"({"type": "function", "function": {"name": "f"}})";
  expect(R"("tools": {"name": "f"})", "tools", "must be a list");
  expect(R"("tools": [{"type": "retrieval"}])", "tools[0].type", "function");
  expect(R"("tools": [{"type": "function"}])", "tools[0].function", "is required");
  expect(R"("tools": [{"type": "function", "function": {"name": 3}}])", "tools[0].function.name", "string");
  expect(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])",
         "tools[0].function.parameters", "JSON Schema");
  expect(R"("tool_choice": "required")", "tool_choice", "no 'tools'");
  expect(R"("tools": [)" + tool + R"(], "tool_choice": {"type": "function", "function": {"name": "g"}})",
         "tool_choice.function.name", "not in 'tools'");
  expect(R"("tools": [)" + tool + R"(], "tool_choice": {"type": "function"})", "tool_choice.function.name",
         "string");
  expect(R"("tools": [)" + tool + R"(], "tool_choice": "required", "response_format": {"type": "json_object"})",
         "response_format", "tool_choice");
  expect(R"("tools": [)" + tool + R"(], "tool_choice": "sometimes")", "tool_choice", "auto");
  expect(R"("functions": [{"name": "f"}])", "functions", "not supported");
  expect(R"("parallel_tool_calls": "yes")", "parallel_tool_calls", "true or false");
  auto expect_messages = [&](const std::string& messages, const std::string& param, const std::string& words) {
    const std::string body = R"({"messages": )" + messages + "}";
    auto [st, r] = api.post("/v1/chat/completions", body);
    EXPECT_EQ(st, 400) << body << " -> " << r.dump();
    EXPECT_EQ(r["error"]["param"], param) << body << " -> " << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find(words), std::string::npos) << r.dump();
  };
  const std::string user = R"({"role": "user", "content": "hi"})";
  expect_messages("[" + user + R"(, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}, )" +
                  R"({"role": "tool", "content": "x"}])", "messages[1].tool_calls[0].function.arguments", "string");
  expect_messages("[" + user + R"(, {"role": "assistant", "tool_calls": {"x": 1}}, {"role": "tool", "content": "x"}])",
                  "messages[1].tool_calls", "list");
  expect_messages("[" + user + R"(, {"role": "tool", "content": "x"}])", "messages[1].role", "assistant");
  expect_messages("[" + user + R"(, {"role": "function", "name": "f", "content": "x"}])", "messages[1].role", "tool");
  expect_messages("[" + user + R"(, {"role": "assistant", "content": null}, {"role": "tool", "content": "x"}])",
                  "messages[1].content", "string");
  expect_messages(R"([{"role": "tool", "tool_call_id": 5, "content": "x"}])", "messages[0].tool_call_id", "string");
  expect_messages(R"([{"role": "robot", "content": "x"}])", "messages[0].role", "tool");
}

// 32 concurrent clients × 20 requests: mixed prompt and output lengths, a quarter streamed and
// hung up on mid-stream, some malformed. Every request gets an answer (200, or a clean 4xx/503),
// the server stays up, and at the end nothing runs and no block is held.
TEST(ServeLoad, ConcurrentClientsMixedAndCancelled) {
  ServerProcess s("--max-num-seqs 16 --max-queue 48 --max-num-batched-tokens 128");
  ASSERT_GT(s.port(), 0) << s.read_log();
  std::atomic<int> ok{0}, rejected{0}, cancelled{0}, bad{0};
  std::mutex odd_mu;
  std::vector<std::string> odd;  // answers that are neither 200 nor 503
  std::vector<std::thread> clients;
  for (int c = 0; c < 32; ++c)
    clients.emplace_back([&, c] {
      httplib::Client cli("127.0.0.1", s.port());
      cli.set_read_timeout(120, 0);
      for (int r = 0; r < 20; ++r) {
        const int kind = (c * 20 + r) % 8;
        std::vector<int> prompt;
        for (int i = 0; i < 3 + (c * 7 + r * 13) % 60; ++i) prompt.push_back(1 + (c * 31 + r * 17 + i * 5) % 500);
        json body = {{"prompt", prompt}, {"max_tokens", 1 + (c + r * 3) % 24}, {"temperature", (r % 3) * 0.5},
                     {"seed", c * 100 + r}};
        if (kind == 7) {  // malformed
          auto res = cli.Post("/v1/completions", r % 2 ? "{\"prompt\": 5}" : "{oops", "application/json");
          if (res && res->status == 400) ++bad;
          continue;
        }
        if (kind == 3 || kind == 5) {  // streamed, hung up after the first event
          body["stream"] = true;
          body["max_tokens"] = 200;
          httplib::Request req;
          req.method = "POST";
          req.path = "/v1/completions";
          req.headers = {{"Content-Type", "application/json"}};
          req.body = body.dump();
          int events = 0;
          req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++events < 2; };
          httplib::Response res;
          httplib::Error err;
          cli.send(req, res, err);
          ++cancelled;
          continue;
        }
        auto res = cli.Post("/v1/completions", body.dump(), "application/json");
        if (res && res->status == 200) {
          ++ok;
        } else if (res && res->status == 503) {
          ++rejected;
        } else {
          std::lock_guard<std::mutex> lock(odd_mu);
          odd.push_back((res ? std::to_string(res->status) + " " + res->body : "transport error " + httplib::to_string(res.error())) +
                        " (client " + std::to_string(c) + ", request " + std::to_string(r) + ")");
        }
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok + rejected, 32 * 20 * 5 / 8) << "every plain request answered (200 or 503); others: "
                                             << odd.size() << ", first: " << (odd.empty() ? "" : odd.front());
  EXPECT_GT(ok, 0);
  EXPECT_EQ(bad, 32 * 20 / 8) << "every malformed one got 400";
  EXPECT_EQ(cancelled, 32 * 20 * 2 / 8);
  httplib::Client cli("127.0.0.1", s.port());
  std::string metrics;
  for (int i = 0; i < 100; ++i) {
    auto m = cli.Get("/metrics");
    ASSERT_TRUE(m) << "the server is alive";
    metrics = m->body;
    if (metrics.find("unillm_num_requests_running 0\n") != std::string::npos &&
        metrics.find("unillm_num_requests_waiting 0\n") != std::string::npos &&
        metrics.find("unillm_kv_blocks{state=\"used\"} 0\n") != std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(metrics.find("unillm_num_requests_running 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("unillm_kv_blocks{state=\"used\"} 0\n"), std::string::npos) << metrics;
  EXPECT_EQ(s.terminate(), 0) << s.read_log();
}

// A reply that is a call becomes tool_calls, whole and streamed. The story model never writes
// one by itself: under the mistral template (whose extractor reads {"name", "arguments"} JSON) a
// response_format schema admitting only the call makes it write exactly that call.
TEST(ServeProcess, ReplyThatIsACallBecomesToolCalls) {
  ServerProcess server("--template mistral");
  ASSERT_GT(server.port(), 0) << server.read_log();
  Api api(server.port());
  const json schema = json::parse(R"({"type": "object", "properties": {
      "name": {"enum": ["get_weather"]},
      "arguments": {"type": "object", "properties": {"city": {"enum": ["Paris"]}},
                    "required": ["city"], "additionalProperties": false}},
      "required": ["name", "arguments"], "additionalProperties": false})");
  json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
               {"tools", json::parse(R"([{"type": "function", "function": {"name": "get_weather",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])")},
               {"max_completion_tokens", 200}, {"temperature", 0},
               {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "call"}, {"schema", schema}}}}}};
  auto [st, r] = api.post("/v1/chat/completions", body.dump());
  ASSERT_EQ(st, 200) << r.dump();
  const json& c = r["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls") << r.dump();
  EXPECT_TRUE(c["message"]["content"].is_null()) << r.dump();
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.dump();
  const json& call = c["message"]["tool_calls"][0];
  EXPECT_TRUE(std::regex_match(call["id"].get<std::string>(), std::regex("call_[0-9a-f]{32}"))) << call;
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], "{\"city\": \"Paris\"}");
  // Streamed: the role, then the call in one delta (with its index), then [DONE].
  body["stream"] = true;
  auto events = api.stream("/v1/chat/completions", body);
  ASSERT_EQ(events.size(), 3u);
  const json s = json::parse(events[1])["choices"][0];
  EXPECT_EQ(s["finish_reason"], "tool_calls");
  ASSERT_EQ(s["delta"]["tool_calls"].size(), 1u) << events[1];
  EXPECT_EQ(s["delta"]["tool_calls"][0]["index"], 0);
  EXPECT_EQ(s["delta"]["tool_calls"][0]["function"], call["function"]);
  EXPECT_FALSE(s["delta"].contains("content"));
  // Without tools the same reply is plain text.
  body.erase("tools");
  body["stream"] = false;
  auto [st2, plain] = api.post("/v1/chat/completions", body.dump());
  ASSERT_EQ(st2, 200) << plain.dump();
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(plain["choices"][0]["message"]["content"].is_string());
}

TEST(ServeProcess, SigtermStopsWithExitCodeZero) {
  ServerProcess s("");
  ASSERT_GT(s.port(), 0) << s.read_log();
  httplib::Client cli("127.0.0.1", s.port());
  auto r = cli.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(s.terminate(), 0) << s.read_log();
  EXPECT_NE(s.read_log().find("[serve] stopped"), std::string::npos) << s.read_log();
}

// `unillm api cfg.yaml` (LLaMA-Factory's `llamafactory-cli api`): the inference YAML's model and
// template behind the same server; a chat completion equals the flag-started server's. The
// YAML's sampling keys are per request in the API, which the server says.
TEST(ServeProcess, ApiServesTheInferenceYaml) {
  const std::string dir = temp_dir("apiyaml");
  std::ofstream(dir + "/api.yaml") << "model_name_or_path: " << kModel << "\ntemplate: alpaca\n"
                                   << "infer_backend: huggingface\ntemperature: 0.5\n";
  ServerProcess yaml("", "api " + shell_quote(dir + "/api.yaml"));
  ServerProcess flags("--template alpaca");
  ASSERT_GT(yaml.port(), 0) << yaml.read_log();
  ASSERT_GT(flags.port(), 0) << flags.read_log();
  EXPECT_NE(yaml.read_log().find("template 'alpaca'"), std::string::npos) << yaml.read_log();
  EXPECT_NE(yaml.read_log().find("sampling keys and default_system are taken per request"), std::string::npos)
      << yaml.read_log();
  const json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
                     {"max_completion_tokens", 8}, {"temperature", 0}};
  httplib::Client a("127.0.0.1", yaml.port()), b("127.0.0.1", flags.port());
  a.set_read_timeout(60, 0);
  b.set_read_timeout(60, 0);
  auto ra = a.Post("/v1/chat/completions", body.dump(), "application/json");
  auto rb = b.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(ra && rb);
  ASSERT_EQ(ra->status, 200) << ra->body;
  EXPECT_EQ(json::parse(ra->body)["choices"][0]["message"]["content"],
            json::parse(rb->body)["choices"][0]["message"]["content"]);
  EXPECT_EQ(yaml.terminate(), 0) << yaml.read_log();
}

TEST(ServeProcess, BadFlagsAreClearErrors) {
  auto r = run_unillm("serve --model " + shell_quote(kModel) + " --adapter nodir");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("NAME=DIR"), std::string::npos) << r.err;
  r = run_unillm("serve --model " + shell_quote(kModel) + " --max-num-seqs 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("max-num-seqs"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace unillm::testing
