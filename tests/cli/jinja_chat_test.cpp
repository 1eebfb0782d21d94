// A model whose tokenizer_config.json carries a Jinja chat_template no built-in template maps to:
// `unillm chat` answers, `unillm serve` renders chat completions (tools included) and `unillm
// train` (stage sft) runs through the model's own Jinja.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "data/jinja_template.h"
#include "io/tokenizer.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::source_path;

// stories260K with an unknown Jinja template (a made-up "<<role>>" format).
std::string jinja_model(const std::string& dir) {
  const std::string model = dir + "/model";
  fs::create_directories(model);
  for (const auto& e : fs::directory_iterator(source_path("assets/stories260K")))
    fs::copy_file(e.path(), model + "/" + e.path().filename().string());
  std::ifstream in(model + "/tokenizer_config.json");
  nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(in);
  in.close();
  cfg["chat_template"] =
      "{{ bos_token }}{% if tools %}<<tools>> {{ tools|tojson }}{% endif %}"
      "{% for m in messages %}<<{{ m.role }}>> {{ m.content }}"
      "{% if m.tool_calls %}{{ m.tool_calls|tojson }}{% endif %}"
      "{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}\n{% endfor %}"
      "{% if add_generation_prompt %}<<assistant>> {% endif %}";
  std::ofstream(model + "/tokenizer_config.json") << cfg.dump(2);
  return model;
}

TEST(JinjaChat, ChatAnswersThroughTheModelsOwnTemplate) {
  const std::string dir = testing::temp_dir("jinja_chat");
  const std::string model = jinja_model(dir);
  std::ofstream(dir + "/in.txt") << "Tell me a story.\nAnd then?\n";
  auto r =
      run_unillm("chat --model " + model + " --temperature 0 --max-new-tokens 8", dir + "/in.txt");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("chat template 'jinja'"), std::string::npos) << r.err;
  // Two answers, one per stdin line.
  size_t first = r.out.find("Assistant: ");
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Assistant: ", first + 1), std::string::npos) << r.out;
}

// `unillm serve --port 0` on model; returns its pid and port (port 0 when it did not start).
std::pair<pid_t, int> start_server(const std::string& model, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string cmd = std::string(UNILLM_BINARY_DIR) + "/unillm serve --model " + model +
                            " --served-model-name m --port 0 --threads 1 2>" + log;
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::regex re("listening on http://127\\.0\\.0\\.1:(\\d+)");
  for (int i = 0; i < 1200; ++i) {  // 60 s
    std::stringstream text;
    text << std::ifstream(log).rdbuf();
    std::smatch m;
    const std::string s = text.str();
    if (std::regex_search(s, m, re)) return {pid, std::stoi(m[1])};
    if (waitpid(pid, nullptr, WNOHANG) == pid) return {-1, 0};
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return {pid, 0};
}

TEST(JinjaChat, ServeRendersChatCompletionsWithTools) {
  const std::string dir = testing::temp_dir("jinja_serve");
  const std::string model = jinja_model(dir);
  auto [pid, port] = start_server(model, dir + "/stderr.txt");
  ASSERT_GT(port, 0) << "the server did not start";
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  const nlohmann::json body = {
      {"model", "m"},
      {"max_tokens", 4},
      {"temperature", 0},
      {"messages",
       {{{"role", "system"}, {"content", "Be kind."}},
        {{"role", "user"}, {"content", "Hi"}},
        {{"role", "assistant"},
         {"tool_calls",
          {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{\"a\": 1}"}}}}}}},
        {{"role", "tool"}, {"content", "3"}}}},
      {"tools",
       {{{"type", "function"},
         {"function",
          {{"name", "f"},
           {"description", "F."},
           {"parameters", {{"type", "object"}, {"properties", nlohmann::json::object()}}}}}}}}};
  auto r = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  // The prompt is the Jinja's rendering: as many tokens as JinjaChatTemplate gives here.
  auto tok = io::Tokenizer::load(model);
  auto t = data::JinjaChatTemplate::load(model, *tok);
  const std::vector<data::Message> m = {
      {data::Role::kUser, "Hi"},
      {data::Role::kFunction, R"([{"name": "f", "arguments": {"a": 1}}])"},
      {data::Role::kObservation, "3"}};
  const std::string tools =
      R"([{"name": "f", "description": "F.", "parameters": {"type": "object", "properties": {}}}])";
  const auto ids = t->encode_prompt(m, "Be kind.", tools);
  EXPECT_EQ(nlohmann::json::parse(r->body)["usage"]["prompt_tokens"], ids.size()) << r->body;
  EXPECT_GT(ids.size(), t->encode_prompt(m, "Be kind.", "").size() + 20);  // the tools count
}

TEST(JinjaChat, SftTrainsThroughTheModelsOwnTemplate) {
  const std::string dir = testing::temp_dir("jinja_sft");
  const std::string model = jinja_model(dir);
  std::ofstream(dir + "/sft.yaml")
      << "model_name_or_path: " << model << "\n"
      << "stage: sft\ndo_train: true\nfinetuning_type: full\n"
      << "dataset: alpaca_en_demo\ndataset_dir: " << source_path("data")
      << "\ncutoff_len: 96\nmax_samples: 16\n"
      << "output_dir: " << dir << "/out\n"
      << "per_device_train_batch_size: 4\nlearning_rate: 5.0e-3\n"
      << "max_steps: 3\nlogging_steps: 1\nsave_steps: 100\n";
  auto r = run_unillm("train " + dir + "/sft.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("template 'jinja'"), std::string::npos) << r.err;
  EXPECT_EQ(testing::log_lines(dir + "/out").size(), 3u);
  // `template: jinja` names it explicitly; on a model without a chat_template it is refused.
  auto named = run_unillm(
      "train " + dir + "/sft.yaml template=jinja max_steps=1 output_dir=" + dir + "/named --quiet");
  EXPECT_EQ(named.exit_code, 0) << named.err;
  auto none =
      run_unillm("train " + dir + "/sft.yaml template=jinja max_steps=1 output_dir=" + dir +
                 "/none model_name_or_path=" + source_path("assets/stories260K") + " --quiet");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("has none"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace unillm
