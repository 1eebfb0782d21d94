// `unillm eval choice` / `unillm eval CONFIG.yaml` (cmd_eval_choice.cpp): LLaMA-Factory's
// `llamafactory-cli eval` multiple-choice benchmarks.
#pragma once

#include <string>
#include <vector>

namespace unillm::cli {

int eval_choice(const std::vector<std::string>& args);
// path: a LLaMA-Factory eval YAML (model_name_or_path, task, task_dir, template, lang, n_shot, …).
int eval_choice_config(const std::string& path, const std::vector<std::string>& rest);

}  // namespace unillm::cli
