// `unillm chat`: an interactive, streaming, multi-turn conversation through a chat template
// (LLaMA-Factory's `llamafactory-cli chat`). One line of stdin is one user turn; `/clear` forgets
// the history, `/exit` (or end of input) quits. `unillm chat cfg.yaml` reads LLaMA-Factory's inference
// YAML instead of flags (inference_config.h).
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/inference_config.h"
#include "cli/sampling_flags.h"
#include "core/error.h"
#include "data/sft.h"
#include "data/template.h"
#include "infer/engine_generate.h"

namespace unillm::cli {

namespace {

struct ChatFlags {
  std::string model, template_name, system, enable_thinking, kv_dtype = "f32";
  std::vector<std::string> adapters;
  SamplingFlags sampling;
  RuntimeOptions runtime;
  InferenceOptions inference;
};

// Drops the oldest (user, assistant) pairs until the prompt fits the context with room to answer.
std::vector<int32_t> fit_prompt(const data::ChatTemplate& t, std::vector<data::Message>& messages,
                                const std::string& system, int64_t limit) {
  for (;;) {
    auto ids = t.encode_prompt(messages, system);
    if (static_cast<int64_t>(ids.size()) < limit || messages.size() <= 1) return ids;
    messages.erase(messages.begin(), messages.begin() + 2);
    std::fprintf(stderr, "unillm: note: dropped the oldest turn to fit the context\n");
  }
}

}  // namespace

int cmd_chat(const std::vector<std::string>& args) {
  // `unillm chat cfg.yaml`: LLaMA-Factory's inference YAML, as `llamafactory-cli chat cfg.yaml`.
  if (!args.empty() && is_config_file(args[0])) return cmd_chat(inference_flags_from_config(args, false));
  ChatFlags f;
  ArgParser p("chat", "Chat with a model through a chat template (stdin lines are user turns; "
                      "/clear forgets the history, /exit quits).");
  p.option("model", "model dir", &f.model);
  p.repeated("adapter", "a PEFT LoRA adapter dir to apply (repeatable)", &f.adapters);
  p.option("template", "chat template name (default: from the model's chat_template)",
           &f.template_name);
  p.option("system", "system prompt (default: the template's)", &f.system);
  p.option("enable-thinking", "reasoning templates: true (default) or false (LLaMA-Factory's enable_thinking)",
           &f.enable_thinking);
  add_sampling_options(p, f.sampling);
  add_kv_cache_dtype_option(p, f.kv_dtype);
  add_runtime_options(p, f.runtime);
  add_inference_options(p, f.inference);
  if (!p.parse(args)) return print_help(p);
  p.require("model");
  const DType kv_dtype = parse_kv_cache_dtype(f.kv_dtype);  // before the slow load
  const Device device = setup_runtime(f.runtime);
  auto [tok, model] = load_model(f.model, f.adapters, device, &f.inference);
  auto choice = data::choose_template(f.template_name, f.model);
  if (f.template_name.empty())
    std::fprintf(stderr, "unillm: chat template '%s'%s\n", choice.name.c_str(),
                 choice.name == "empty" ? " (the model has none; give --template, e.g. alpaca)" : " (from the model's chat_template)");
  apply_enable_thinking(f.enable_thinking, choice.options);
  auto tmpl = data::make_chat_template(choice, *tok, choice.options);
  std::vector<int32_t> eos = tmpl->stop_ids();
  std::vector<int32_t> unused;
  apply_generation_config(f.model, p, f.sampling, unused, model->config().vocab_size);  // sampling defaults only
  validate_sampling(f.sampling, "chat");
  infer::GenerateOptions go = generate_options(f.sampling, eos);
  go.kv_dtype = kv_dtype;
  const bool tty = isatty(0);
  const int64_t limit = model->config().max_position_embeddings;
  std::vector<data::Message> messages;
  std::string line;
  for (;;) {
    if (tty) std::fputs("\nUser: ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line == "/exit") break;
    if (line == "/clear") {
      messages.clear();
      std::puts("History has been removed.");
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({data::Role::kUser, line});
    auto prompt = fit_prompt(*tmpl, messages, f.system, limit);
    std::fputs("Assistant: ", stdout);
    io::StreamDecoder decoder(*tok, /*skip_special_tokens=*/true);
    std::vector<int32_t> reply;
    auto r = infer::engine_generate(*model, prompt, go, [&](int32_t id) {
      reply.push_back(id);
      std::string s = decoder.push(id);
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    std::string rest = decoder.finish();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (r.reason == infer::StopReason::eos && !reply.empty()) reply.pop_back();
    messages.push_back({data::Role::kAssistant, tok->decode(reply, true)});
  }
  return 0;
}

}  // namespace unillm::cli
