// `unillm init`: a randomly initialised model (HF's initialisation) from a config.json, for
// pretraining from scratch.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "io/json_file.h"
#include "models/causal_lm.h"
#include "models/save.h"

namespace unillm::cli {

int cmd_init(const std::vector<std::string>& args) {
  std::string config, out, tokenizer;
  int64_t seed = 42;
  bool force = false;
  ArgParser p("init", "Write a randomly initialised HF model dir from a config.json.");
  p.option("config", "config.json of the architecture", &config);
  p.option("out", "output dir", &out);
  p.option("seed", "initialisation seed (default 42)", &seed);
  p.option("tokenizer", "copy tokenizer files from this dir", &tokenizer);
  p.flag("force", "write into a non-empty output dir", &force);
  if (!p.parse(args)) return print_help(p);
  p.require("config");
  p.require("out");
  namespace fs = std::filesystem;
  if (fs::exists(out) && !fs::is_empty(out) && !force)
    UNILLM_THROW(ConfigError, "[init] ", out, " exists and is not empty (use --force)");
  if (!tokenizer.empty() && !fs::is_directory(tokenizer))
    UNILLM_THROW(IoError, "[init] --tokenizer ", tokenizer, ": not a directory");
  cpu_register_only();
  models::ModelConfig cfg = models::load_model_config(config);
  auto model = models::build_causal_lm(cfg, DType::f32);
  models::init_weights(*model, cfg.initializer_range, static_cast<uint64_t>(seed), cfg.pad_token_id);
  models::SaveOptions so;
  so.tokenizer_dir = tokenizer;
  models::save_pretrained(*model, out, so);
  int64_t params = 0;
  for (auto& r : model->module().parameters()) params += r.tensor->numel();
  std::printf("wrote %s (%lld parameters, std %g, seed %lld)\n", out.c_str(), static_cast<long long>(params),
              cfg.initializer_range, static_cast<long long>(seed));
  return 0;
}

}  // namespace unillm::cli
