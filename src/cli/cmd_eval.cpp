// `unillm eval ppl`: perplexity of a text file with HF's sliding-window rule.
#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "cli/common.h"
#include "infer/perplexity.h"
#include "models/causal_lm.h"

namespace unillm::cli {

namespace {
int eval_ppl(const std::vector<std::string>& args) {
  std::string model_dir, file;
  int64_t max_length = 0, stride = 0;
  bool json = false;
  std::vector<std::string> adapters;
  RuntimeOptions runtime;
  InferenceOptions inference;
  ArgParser p("eval ppl", "Perplexity of a text file (one text, trailing newlines stripped).");
  p.option("model", "model dir", &model_dir);
  p.option("file", "text file", &file);
  p.repeated("adapter", "a PEFT LoRA adapter dir to apply (repeatable)", &adapters);
  p.option("max-length", "window length (default min(max_position_embeddings, 4096))", &max_length);
  p.option("stride", "window stride (default = max-length)", &stride);
  p.flag("json", "print one JSON object", &json);
  add_runtime_options(p, runtime);
  add_inference_options(p, inference);
  if (!p.parse(args)) return print_help(p);
  p.require("model");
  p.require("file");
  const Device device = setup_runtime(runtime);
  std::string text = read_text_file(file);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  auto [tok, model] = load_model(model_dir, adapters, device, &inference);
  if (!p.given("max-length")) max_length = std::min<int64_t>(model->config().max_position_embeddings, 4096);
  if (!p.given("stride")) stride = max_length;
  if (max_length < 2) UNILLM_THROW(ConfigError, "[eval ppl] --max-length must be >= 2");
  if (stride < 1 || stride > max_length)
    UNILLM_THROW(ConfigError, "[eval ppl] --stride must be in [1, max-length]");
  std::vector<int32_t> ids = tok->encode(text);
  if (ids.size() < 2) UNILLM_THROW(ConfigError, "[eval ppl] ", file, ": needs at least 2 tokens");
  auto r = infer::perplexity(*model, ids, max_length, stride);
  if (json)
    std::printf("{\"ppl\": %.6f, \"nll\": %.8f, \"tokens\": %lld}\n", r.ppl, r.nll, static_cast<long long>(r.tokens));
  else
    std::printf("ppl=%.6f nll=%.8f tokens=%lld\n", r.ppl, r.nll, static_cast<long long>(r.tokens));
  return 0;
}
}  // namespace

int cmd_eval(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "ppl") {
    std::fprintf(stderr, "usage: unillm eval ppl --model DIR --file TEXT [--max-length N] [--stride S] [--json]\n");
    return 2;
  }
  return eval_ppl(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace unillm::cli
