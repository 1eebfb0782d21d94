// `unillm serve`: load the model (and named LoRA adapters), size the KV cache, start the engine
// thread and the OpenAI-compatible HTTP server; SIGINT/SIGTERM stop it cleanly (exit 0).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/inference_config.h"
#include "core/error.h"
#include "data/sft.h"
#include "models/adapter.h"
#include "serve/server.h"

namespace unillm::cli {

namespace {

struct ServeFlags {
  std::string model, host = "127.0.0.1", api_key, served_name, template_name, enable_thinking;
  std::vector<std::string> adapters, base_adapters;
  int64_t port = 8000, max_num_seqs = 32, max_batched = 256, block_size = 16;
  int64_t kv_memory_mib = 0, num_kv_blocks = 0, max_model_len = 0, max_queue = 256;
  bool no_prefix_caching = false;
  std::string kv_dtype = "f32";
  RuntimeOptions runtime;
  InferenceOptions inference;
};

// SIGINT/SIGTERM (and SIGUSR1, our own wake-up at a normal exit), blocked in every thread: the
// calling thread blocks them before any other thread exists (OpenMP's, the engine's, HTTP's
// inherit the mask), and one thread takes them with sigwait and stops the server. Signal
// handlers may not take locks; sigwait may.
sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

std::thread stop_on_signals(serve::Server& server, sigset_t set) {
  return std::thread([&server, set] {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGUSR1) return;
    std::fprintf(stderr, "[serve] %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  });
}

}  // namespace

// `unillm api cfg.yaml`: LLaMA-Factory's `llamafactory-cli api cfg.yaml` — the inference YAML's
// model, adapters and template served by `serve` (inference_config.h).
int cmd_api(const std::vector<std::string>& args) {
  if (args.empty() || !is_config_file(args[0])) {
    std::printf("usage: unillm api CONFIG.yaml [key=value ...] [serve flags: --host, --port, ...]\n"
                "Serves LLaMA-Factory's inference YAML (model_name_or_path, adapter_name_or_path, template)\n"
                "over the OpenAI-compatible API of `unillm serve` (docs/serving.md).\n");
    return args.empty() || args[0] != "--help" ? 2 : 0;
  }
  return cmd_serve(inference_flags_from_config(args, true));
}

int cmd_serve(const std::vector<std::string>& args) {
  const sigset_t stop_signals = block_stop_signals();  // before any thread starts
  ServeFlags f;
  ArgParser p("serve", "Serve a model over an OpenAI-compatible HTTP API (docs/serving.md).");
  p.option("model", "model dir (config.json, safetensors, tokenizer files)", &f.model);
  p.repeated("adapter", "NAME=DIR: a PEFT LoRA adapter served as model NAME (repeatable)", &f.adapters);
  p.repeated("base-adapter", "DIR: a PEFT LoRA adapter applied to the served base model (repeatable)",
             &f.base_adapters);
  p.option("host", "address to listen on (default 127.0.0.1: this machine only)", &f.host);
  p.option("port", "port (default 8000; 0 = any free one, printed at start)", &f.port);
  p.option("api-key", "require Authorization: Bearer KEY on /v1/* and /tokenize", &f.api_key);
  p.option("served-model-name", "the base model's name in requests (default: the model dir's name)", &f.served_name);
  p.option("template", "chat template for /v1/chat/completions (default: from the model's chat_template)", &f.template_name);
  p.option("enable-thinking", "reasoning templates: true (default) or false", &f.enable_thinking);
  p.option("max-num-seqs", "sequences per step (default 32)", &f.max_num_seqs);
  p.option("max-num-batched-tokens", "tokens per step: decodes first, prompts chunked to the rest (default 256: bench/serving.md)", &f.max_batched);
  p.option("block-size", "KV cache block size in tokens (default 16)", &f.block_size);
  p.option("kv-cache-memory", "KV cache size in MiB (default: max-num-seqs full-length sequences)", &f.kv_memory_mib);
  p.option("num-kv-blocks", "KV cache size in blocks (instead of --kv-cache-memory)", &f.num_kv_blocks);
  p.option("max-model-len", "prompt + max_tokens cap (default: max_position_embeddings)", &f.max_model_len);
  p.option("max-queue", "waiting sequences beyond which requests get 503 (default 256)", &f.max_queue);
  p.flag("no-prefix-caching", "do not reuse the KV blocks of identical prompt prefixes", &f.no_prefix_caching);
  add_kv_cache_dtype_option(p, f.kv_dtype);
  add_runtime_options(p, f.runtime);
  add_inference_options(p, f.inference);
  if (!p.parse(args)) return print_help(p);
  p.require("model");
  if (p.given("kv-cache-memory") && p.given("num-kv-blocks"))
    UNILLM_THROW(ConfigError, "[serve] give at most one of --kv-cache-memory and --num-kv-blocks");
  auto positive = [](const char* flag, int64_t v) {
    if (v <= 0) UNILLM_THROW(ConfigError, "[serve] --", flag, " must be positive, got ", v);
  };
  positive("max-num-seqs", f.max_num_seqs);
  positive("max-num-batched-tokens", f.max_batched);
  positive("block-size", f.block_size);
  positive("max-queue", f.max_queue);
  if (f.port < 0 || f.port > 65535) UNILLM_THROW(ConfigError, "[serve] --port must be 0..65535, got ", f.port);
  const Device device = setup_runtime(f.runtime);

  std::vector<std::string> names, dirs;
  for (const auto& a : f.adapters) {
    const auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == a.size())
      UNILLM_THROW(ConfigError, "[serve] --adapter takes NAME=DIR, got '", a, "'");
    names.push_back(a.substr(0, eq));
    dirs.push_back(a.substr(eq + 1));
  }
  auto [tok, model] = load_model(f.model, f.base_adapters, device, &f.inference);
  for (size_t i = 0; i < names.size(); ++i) models::load_adapter(*model, dirs[i], names[i]);
  model->set_active_adapters({});  // "" in a request = the base model; adapters by name
  const auto& cfg = model->config();

  std::unique_ptr<data::ChatTemplate> tmpl;
  auto choice = data::choose_template(f.template_name, f.model);
  apply_enable_thinking(f.enable_thinking, choice.options);
  if (choice.name != "empty" || !f.template_name.empty())
    tmpl = data::make_chat_template(choice, *tok, choice.options);
  std::vector<int32_t> eos = cfg.eos_token_ids;
  if (eos.empty()) eos = tok->stop_ids();

  serve::ServerConfig sc;
  sc.host = f.host;
  sc.port = static_cast<int>(f.port);
  sc.api_key = f.api_key;
  sc.model_name = f.served_name.empty() ? std::filesystem::path(f.model).lexically_normal().filename().string() : f.served_name;
  if (sc.model_name.empty()) sc.model_name = std::filesystem::path(f.model).lexically_normal().parent_path().filename().string();
  sc.adapters = names;
  sc.max_model_len = f.max_model_len > 0 ? f.max_model_len : cfg.max_position_embeddings;
  sc.max_queue = f.max_queue;
  sc.http_threads = static_cast<int>(f.max_num_seqs) + 4;

  infer::EngineConfig ec;
  ec.block_size = f.block_size;
  ec.prefix_caching = !f.no_prefix_caching;
  ec.scheduler.max_num_seqs = f.max_num_seqs;
  ec.scheduler.max_num_batched_tokens = f.max_batched;
  ec.kv_dtype = parse_kv_cache_dtype(f.kv_dtype);
  const int64_t block_bytes = 2 * cfg.num_layers * f.block_size * cfg.num_kv_heads * cfg.head_dim *
                              static_cast<int64_t>(dtype_size(ec.kv_dtype));
  if (f.num_kv_blocks > 0) {
    ec.num_blocks = f.num_kv_blocks;
  } else if (f.kv_memory_mib > 0) {
    ec.num_blocks = (f.kv_memory_mib << 20) / block_bytes;
  } else {
    ec.num_blocks = f.max_num_seqs * infer::blocks_for(sc.max_model_len, f.block_size);
  }
  if (ec.num_blocks < infer::blocks_for(sc.max_model_len, f.block_size))
    std::fprintf(stderr, "unillm: warning: the KV cache (%lld blocks) cannot hold one sequence of "
                 "--max-model-len %lld tokens; longer requests are refused\n",
                 static_cast<long long>(ec.num_blocks), static_cast<long long>(sc.max_model_len));
  if (ec.num_blocks <= 0) UNILLM_THROW(ConfigError, "[serve] the KV cache would hold no block");

  serve::Server server(*model, *tok, tmpl.get(), eos, ec, sc);
  std::thread signals = stop_on_signals(server, stop_signals);
  const int port = server.listen_port();
  std::fprintf(stderr, "[serve] model '%s'%s, %lld KV blocks of %lld tokens (%.1f MiB), template '%s'\n",
               sc.model_name.c_str(), names.empty() ? "" : " with adapters", static_cast<long long>(ec.num_blocks),
               static_cast<long long>(f.block_size), static_cast<double>(ec.num_blocks * block_bytes) / (1 << 20),
               tmpl ? choice.name.c_str() : "none");
  std::fprintf(stderr, "[serve] listening on http://%s:%d\n", f.host.c_str(), port);
  std::fflush(stderr);
  server.serve();
  pthread_kill(signals.native_handle(), SIGUSR1);  // not waiting: wake the signal thread
  signals.join();
  std::fprintf(stderr, "[serve] stopped\n");
  return 0;
}

}  // namespace unillm::cli
