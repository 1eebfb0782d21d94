// `unillm chat CONFIG.yaml` and `unillm api CONFIG.yaml`: LLaMA-Factory's inference YAML
// (`llamafactory-cli chat|api cfg.yaml`: model_name_or_path, adapter_name_or_path, template,
// infer_backend and its GeneratingArguments) read through the same key table as train and export,
// then turned into the flags of `chat` / `serve`, so both spellings run one code path.
#pragma once

#include <string>
#include <vector>

namespace unillm::data {
struct TemplateOptions;
}

namespace unillm::cli {

// Whether a command's first argument names a config file (.yaml / .yml) rather than a flag.
bool is_config_file(const std::string& arg);

// args = CONFIG [key=value ...] [--flag ...]: the config (overrides applied) as flags of `chat`
// (serve = false) or `serve` (true), followed by the given flags, which win over the config's.
// Prints the config's warnings. Throws ConfigError/NotImplemented listing every problem of the
// file at once (train's rules; num_beams > 1 is not implemented).
std::vector<std::string> inference_flags_from_config(const std::vector<std::string>& args, bool serve);

// --enable-thinking VALUE ("" = not given; "true" / "false") into a template's options.
void apply_enable_thinking(const std::string& value, data::TemplateOptions& options);

}  // namespace unillm::cli
