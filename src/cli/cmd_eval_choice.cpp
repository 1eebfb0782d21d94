// `unillm eval choice` and `unillm eval CONFIG.yaml`: LLaMA-Factory's `llamafactory-cli eval`
// (MMLU, CMMLU, C-Eval from their task directories; its eval/evaluator.py). Each question is the
// chat template's one-turn encoding of the few-shot conversation (data/choice_task.h); the model's
// next-token logits at the prompt's last position pick among the tokens of "A" … "D" (the last
// id of each letter's encoding, as LLaMA-Factory's choice_inputs); accuracy per category of
// mapping.json and on average, printed and saved as LLaMA-Factory saves them. docs/evaluation.md.
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/eval_choice.h"
#include "core/error.h"
#include "data/choice_task.h"
#include "data/sft.h"
#include "io/json_file.h"
#include "models/causal_lm.h"

namespace unillm::cli {

namespace {

namespace fs = std::filesystem;

struct ChoiceEvalOptions {
  std::string model_dir, template_name, task, task_dir = "evaluation", lang = "en", save_dir;
  std::vector<std::string> adapters;
  int64_t n_shot = 5, batch_size = 4;
  bool json = false;
};

// LLaMA-Factory's SUBJECTS: the categories' print order (others follow in mapping order).
const char* const kCategories[] = {"Average", "STEM", "Social Sciences", "Humanities", "Other"};

int run_choice_eval(const ChoiceEvalOptions& o, const RuntimeOptions& runtime) {
  if (o.n_shot < 0) UNILLM_THROW(ConfigError, "[eval] n_shot must be >= 0, got ", o.n_shot);
  if (o.batch_size < 1) UNILLM_THROW(ConfigError, "[eval] batch_size must be >= 1, got ", o.batch_size);
  // Bad input before the weights are read.
  const std::vector<data::ChoiceSubject> subjects = data::load_choice_task(o.task_dir, o.task);
  const data::ChoiceFormat format = data::choice_format(o.lang);
  if (!o.save_dir.empty() && fs::exists(o.save_dir))
    UNILLM_THROW(ConfigError, "[eval] save_dir ", o.save_dir, " exists; give a new directory (LLaMA-Factory refuses "
                 "to write into an existing one too)");
  const Device device = setup_runtime(runtime);
  auto [tok, model] = load_model(o.model_dir, o.adapters, device);
  const auto choice = data::choose_template(o.template_name, o.model_dir);
  const auto tmpl = data::make_chat_template(choice, *tok, choice.options);
  std::vector<int32_t> letter_ids;
  for (const char* ch : {"A", "B", "C", "D"}) {
    const std::vector<int32_t> ids = tok->encode(ch, io::EncodeOptions{false, false});
    if (ids.empty()) UNILLM_THROW(ConfigError, "[eval] the tokenizer encodes '", ch, "' as no token");
    letter_ids.push_back(ids.back());
  }
  std::vector<std::pair<std::string, std::vector<bool>>> corrects;  // by category, in print order
  auto category = [&corrects](const std::string& name) -> std::vector<bool>& {
    for (auto& [n, v] : corrects)
      if (n == name) return v;
    return corrects.emplace_back(name, std::vector<bool>{}).second;
  };
  for (const char* c : kCategories) category(c);
  nlohmann::ordered_json results = nlohmann::ordered_json::object();
  autograd::NoGradGuard no_grad;
  for (const data::ChoiceSubject& s : subjects) {
    // The first n_shot dev questions, in file order (LLaMA-Factory draws them in a random order
    // per question from numpy's global state).
    const std::vector<data::ChoiceQuestion> shots(
        s.shots.begin(), s.shots.begin() + std::min<int64_t>(o.n_shot, static_cast<int64_t>(s.shots.size())));
    nlohmann::ordered_json preds = nlohmann::ordered_json::object();
    for (size_t i = 0; i < s.questions.size(); ++i) {
      const data::ChoiceQuestion& q = s.questions[i];
      const std::vector<int32_t> ids = tmpl->encode_oneturn(data::choice_messages(format, shots, q, s.name), "").prompt;
      const auto t = static_cast<int64_t>(ids.size());
      models::KvCaches caches = models::KvCaches::allocate(model->config(), 1, t, DType::f32, model->device());
      const std::vector<float> logits =
          model->forward(models::single_sequence_batch(ids, 0, {0}, t, true), caches).to(Device{}).to_float_vector();
      size_t best = 0;  // the first of equal logits, as torch.argmax
      for (size_t c = 1; c < letter_ids.size(); ++c)
        if (logits[static_cast<size_t>(letter_ids[c])] > logits[static_cast<size_t>(letter_ids[best])]) best = c;
      const std::string pred(1, static_cast<char>('A' + best));
      preds[std::to_string(i)] = pred;
      const bool right = pred == q.answer;
      category(s.category).push_back(right);
      category("Average").push_back(right);
    }
    results[s.key] = preds;
    std::fprintf(stderr, "[eval] %s: %zu questions\n", s.key.c_str(), s.questions.size());
  }
  std::string score_info;
  nlohmann::ordered_json scores = nlohmann::ordered_json::object();
  for (const auto& [name, v] : corrects) {
    if (v.empty()) continue;
    int64_t right = 0;
    for (bool b : v) right += b;
    const double acc = 100.0 * static_cast<double>(right) / static_cast<double>(v.size());
    char line[256];
    std::snprintf(line, sizeof(line), "%15s: %.2f", name.c_str(), acc);
    score_info += (score_info.empty() ? "" : "\n") + std::string(line);
    scores[name] = acc;
  }
  if (o.json)
    std::printf("%s\n", scores.dump().c_str());
  else
    std::printf("%s\n", score_info.c_str());
  if (!o.save_dir.empty()) {
    fs::create_directories(o.save_dir);
    io::write_file_atomic((fs::path(o.save_dir) / "results.json").string(), results.dump(2));
    io::write_file_atomic((fs::path(o.save_dir) / "results.log").string(), score_info);
  }
  return 0;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

int eval_choice(const std::vector<std::string>& args) {
  ChoiceEvalOptions o;
  RuntimeOptions runtime;
  ArgParser p("eval choice", "A multiple-choice benchmark (MMLU, CMMLU, C-Eval) as llamafactory-cli eval runs it.");
  p.option("model", "model dir", &o.model_dir);
  p.repeated("adapter", "a PEFT LoRA adapter dir (repeatable)", &o.adapters);
  p.option("task", "<dataset>_<split>: mmlu_test, cmmlu_test, ceval_validation, ...", &o.task);
  p.option("task_dir", "the directory holding <dataset>/mapping.json and its CSV files (default evaluation)",
           &o.task_dir);
  p.option("template", "chat template (default: as training chooses it; LLaMA-Factory's examples use fewshot)",
           &o.template_name);
  p.option("lang", "en or zh: the prompt's wording (default en)", &o.lang);
  p.option("n_shot", "few-shot examples before each question (default 5)", &o.n_shot);
  p.option("save_dir", "write results.json and results.log here (a new directory)", &o.save_dir);
  p.option("batch_size", "accepted for LLaMA-Factory's key; each prompt runs alone (default 4)", &o.batch_size);
  p.flag("json", "print the scores as one JSON object", &o.json);
  add_runtime_options(p, runtime);
  if (!p.parse(args)) return print_help(p);
  p.require("model");
  p.require("task");
  return run_choice_eval(o, runtime);
}

int eval_choice_config(const std::string& path, const std::vector<std::string>& rest) {
  if (!rest.empty()) UNILLM_THROW(ConfigError, "[eval] ", path, ": no arguments after the config file, got ", rest[0]);
  if (!fs::is_regular_file(path)) UNILLM_THROW(ConfigError, "[eval] ", path, " does not exist");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    UNILLM_THROW(ConfigError, "[eval] ", path, " line ", e.mark.line + 1, ": ", e.msg);
  }
  if (!root.IsMap()) UNILLM_THROW(ConfigError, "[eval] ", path, ": expected a mapping of LLaMA-Factory keys");
  ChoiceEvalOptions o;
  RuntimeOptions runtime;
  // Keys of LLaMA-Factory's eval config (model, data and evaluation arguments); those that change
  // nothing here are accepted without effect, any other is an error naming its line.
  static const char* const kNoEffect[] = {"trust_remote_code", "download_mode", "finetuning_type", "seed",
                                          "cache_dir", "hf_hub_token", "infer_dtype"};
  std::vector<std::string> problems;
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const std::string where = UNILLM_MSG(path, " line ", kv.first.Mark().line + 1);
    try {
      if (key == "model_name_or_path") o.model_dir = kv.second.as<std::string>();
      else if (key == "adapter_name_or_path") o.adapters = split_commas(kv.second.as<std::string>());
      else if (key == "template") o.template_name = kv.second.as<std::string>();
      else if (key == "task") o.task = kv.second.as<std::string>();
      else if (key == "task_dir") o.task_dir = kv.second.as<std::string>();
      else if (key == "lang") o.lang = kv.second.as<std::string>();
      else if (key == "n_shot") o.n_shot = kv.second.as<int64_t>();
      else if (key == "batch_size") o.batch_size = kv.second.as<int64_t>();
      else if (key == "save_dir") o.save_dir = kv.second.IsNull() ? "" : kv.second.as<std::string>();
      else if (std::find_if(std::begin(kNoEffect), std::end(kNoEffect), [&](const char* k) { return key == k; }) ==
               std::end(kNoEffect))
        problems.push_back(where + ": '" + key + "' is not a key of llamafactory-cli eval's config");
    } catch (const YAML::Exception&) {
      problems.push_back(where + ": '" + key + "' has a value of the wrong type");
    }
  }
  if (o.model_dir.empty()) problems.push_back(path + ": model_name_or_path is missing");
  if (o.task.empty()) problems.push_back(path + ": task is missing");
  if (!problems.empty()) {
    std::string all;
    for (const auto& s : problems) all += "\n  " + s;
    UNILLM_THROW(ConfigError, "[eval] ", problems.size(), " problem(s) in ", path, ":", all);
  }
  return run_choice_eval(o, runtime);
}

}  // namespace unillm::cli
