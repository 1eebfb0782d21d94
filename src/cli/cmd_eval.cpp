// `unillm eval ppl`: perplexity of a text file with HF's sliding-window rule.
// `unillm eval reward`: a reward model's accuracy and mean margin on preference pairs.
// `unillm eval bleu|rouge|similarity`: LLaMA-Factory's predict metrics on generated_predictions.jsonl.
// `unillm eval choice` / `unillm eval CONFIG.yaml`: multiple-choice benchmarks (cmd_eval_choice.cpp).
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "cli/common.h"
#include "cli/eval_choice.h"
#include "cli/eval_support.h"
#include "autograd/grad_mode.h"
#include "data/pairwise.h"
#include "data/preference_reader.h"
#include "data/sft.h"
#include "eval/similarity.h"
#include "eval/text.h"
#include "infer/perplexity.h"
#include "io/json_file.h"
#include "models/adapter.h"
#include "models/causal_lm.h"
#include "models/value_head.h"
#include "train/stages/reward.h"

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
// A pairs file read as a LLaMA-Factory ranking dataset: sharegpt when its first record has
// "conversations", else alpaca (instruction/input/history/system + chosen/rejected).
data::DatasetAttr pairs_file(const std::string& file) {
  if (!std::filesystem::exists(file)) UNILLM_THROW(ConfigError, "[eval reward] --file ", file, " does not exist");
  data::DatasetAttr attr;
  attr.name = file;
  attr.files = {file};
  attr.file_type = "json";
  attr.ranking = true;
  attr.columns.chosen = "chosen";
  attr.columns.rejected = "rejected";
  const std::string head = read_text_file(file).substr(0, 4096);
  const bool sharegpt = head.find("\"conversations\"") != std::string::npos;
  attr.formatting = sharegpt ? "sharegpt" : "alpaca";
  attr.columns.history = sharegpt ? std::nullopt : std::optional<std::string>("history");
  attr.columns.system = "system";
  return attr;
}

int eval_reward(const std::vector<std::string>& args) {
  std::string model_dir, file, template_name;
  std::vector<std::string> adapters;
  int64_t cutoff_len = 2048, batch_size = 8;
  bool json = false;
  RuntimeOptions runtime;
  ArgParser p("eval reward", "A reward model (stage rm's output) on preference pairs: accuracy and mean margin.");
  p.option("model", "model dir (with value_head.safetensors when trained with full/freeze, or a LLaMA-Factory v1 "
                    "reward model: *ForTokenClassification)", &model_dir);
  p.repeated("adapter", "a PEFT LoRA adapter dir (the last one holds value_head.safetensors, or is a TOKEN_CLS adapter)",
             &adapters);
  p.option("file", "pairs: a LLaMA-Factory ranking file (alpaca or sharegpt, .json or .jsonl)", &file);
  p.option("template", "chat template (default: as training chooses it)", &template_name);
  p.option("cutoff-len", "cutoff_len of the pairwise encoding (default 2048)", &cutoff_len);
  p.option("batch-size", "pairs per forward (default 8)", &batch_size);
  p.flag("json", "print one JSON object", &json);
  add_runtime_options(p, runtime);
  if (!p.parse(args)) return print_help(p);
  p.require("model");
  p.require("file");
  if (cutoff_len < 2 || batch_size < 1) UNILLM_THROW(ConfigError, "[eval reward] --cutoff-len must be >= 2 and --batch-size >= 1");
  const data::DatasetAttr attr = pairs_file(file);  // bad input before the weights are read
  const Device device = setup_runtime(runtime);
  auto [tok, model] = load_model(model_dir, adapters, device, nullptr, nullptr, /*token_classifier_ok=*/true);
  // LLaMA-Factory v1's reward model: a token classifier's score head, in the model's weights or
  // its TOKEN_CLS adapter; else TRL's value head in value_head.safetensors.
  const bool scored_adapter = !adapters.empty() && models::is_token_classification_adapter(adapters.back());
  const bool scored = scored_adapter || model->config().token_classification;
  const std::string head_dir =
      scored ? (scored_adapter ? adapters.back() : model_dir)
             : (!adapters.empty() && models::has_value_head(adapters.back()) ? adapters.back() : model_dir);
  Rng rng(0);
  models::ValueHead head(model->config().hidden_size, rng, device,
                         scored ? models::ValueHead::Kind::kScore : models::ValueHead::Kind::kTrl);
  if (!head.load(head_dir))
    UNILLM_THROW(ConfigError, "[eval reward] ", scored ? "no score head (score.weight) in " : "no value_head.safetensors in ",
                 head_dir, " (train a reward model with stage: rm; its output dir holds one)");
  const auto choice = data::choose_template(template_name, model_dir);
  const auto tmpl = data::make_chat_template(choice, *tok, choice.options);
  const data::PreferenceSet set = data::read_preferences(attr, {});
  data::TokenizedDataset ds;
  ds.group = 2;
  for (const auto& ex : set.examples) {
    const data::PairwiseExample e = data::encode_pairwise(ex, *tmpl, cutoff_len);
    ds.rows.push_back(e.chosen_ids);
    ds.labels.push_back(e.chosen_labels);
    ds.rows.push_back(e.rejected_ids);
    ds.labels.push_back(e.rejected_labels);
  }
  if (ds.num_examples() == 0) UNILLM_THROW(ConfigError, "[eval reward] ", file, " holds no pair");
  data::LoaderOptions lo;
  lo.pad_id = tmpl->eos_id();
  autograd::NoGradGuard no_grad;
  int64_t right = 0;
  double margin = 0;
  for (int64_t e = 0; e < ds.num_examples(); e += batch_size) {
    const int64_t n = std::min(batch_size, ds.num_examples() - e);
    const data::Batch b = data::make_batch(ds, data::group_rows(ds, e, n), lo);
    const std::vector<float> s =
        train::reward_scores(*model, head, b, false, nullptr).to(Device{}).contiguous().to_float_vector();
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(s[i]) - static_cast<double>(s[n + i]);
      right += d > 0;
      margin += d;
    }
  }
  const int64_t pairs = ds.num_examples();
  const double accuracy = static_cast<double>(right) / static_cast<double>(pairs);
  margin /= static_cast<double>(pairs);
  if (json)
    std::printf("{\"accuracy\": %.6f, \"mean_margin\": %.6f, \"pairs\": %lld}\n", accuracy, margin,
                static_cast<long long>(pairs));
  else
    std::printf("accuracy=%.6f mean_margin=%.6f pairs=%lld\n", accuracy, margin, static_cast<long long>(pairs));
  return 0;
}

// `eval bleu|rouge|similarity`: the keys of LLaMA-Factory's predict_results.json, sorted.
int eval_similarity(const std::string& which, const std::vector<std::string>& args) {
  std::string predictions, dir;
  bool per_sample = false;
  ArgParser p("eval " + which,
              "LLaMA-Factory's predict metrics (sft/metric.py) on a generated_predictions.jsonl.");
  p.option("predictions", "generated_predictions.jsonl (one {\"predict\", \"label\"} a line)",
           &predictions);
  p.option("jieba-dir", "jieba's dict.txt + hmm.tsv (default: assets/jieba)", &dir);
  p.flag("per-sample", "first print each sample's scores (x100, rounded), one JSON list a line",
         &per_sample);
  if (!p.parse(args)) return print_help(p);
  p.require("predictions");
  const auto preds = eval::read_predictions(predictions);
  std::vector<eval::SampleScores> scores;
  if (which == "bleu") {
    for (const auto& x : preds) scores.push_back(eval::score_sample(nullptr, x));
  } else {
    const eval::Jieba jieba = eval::Jieba::load(jieba_dir(dir));
    for (const auto& x : preds) scores.push_back(eval::score_sample(&jieba, x));
  }
  for (size_t i = 0; per_sample && i < scores.size(); ++i)
    std::printf("[%s, %s, %s, %s]\n", py_float(scores[i].bleu4).c_str(),
                py_float(scores[i].rouge1).c_str(), py_float(scores[i].rouge2).c_str(),
                py_float(scores[i].rougel).c_str());
  const eval::SampleScores m = eval::mean_scores(scores);
  std::vector<std::pair<std::string, double>> out;
  if (which != "rouge") out.emplace_back("predict_bleu-4", m.bleu4);
  if (which != "bleu") {
    out.emplace_back("predict_rouge-1", m.rouge1);
    out.emplace_back("predict_rouge-2", m.rouge2);
    out.emplace_back("predict_rouge-l", m.rougel);
  }
  std::string line = "{";
  for (size_t i = 0; i < out.size(); ++i)
    line += (i ? ", \"" : "\"") + out[i].first + "\": " + py_float(out[i].second);
  std::printf("%s}\n", line.c_str());
  return 0;
}

// `eval segment` (hidden, for tests): jieba.cut of --text, or of each line of --file, as JSON
// lists.
int eval_segment(const std::vector<std::string>& args) {
  std::string text, file, dir;
  bool json_lines = false;
  ArgParser p("eval segment",
              "jieba.cut(s) of --text or of each line of --file, one JSON list a line.");
  p.option("text", "the text", &text);
  p.option("file", "a UTF-8 file, one text a line", &file);
  p.flag("json-lines", "each line of --file is a JSON string (texts with newlines)", &json_lines);
  p.option("jieba-dir", "jieba's dict.txt + hmm.tsv (default: assets/jieba)", &dir);
  if (!p.parse(args)) return print_help(p);
  if (p.given("text") == p.given("file"))
    UNILLM_THROW(ConfigError, "[eval segment] give one of --text or --file");
  const eval::Jieba jieba = eval::Jieba::load(jieba_dir(dir));
  std::vector<std::string> lines;
  if (p.given("text")) {
    lines.push_back(text);
  } else {
    std::string all = read_text_file(file);
    for (size_t b = 0; b < all.size();) {
      const size_t e = all.find('\n', b);
      lines.push_back(all.substr(b, e == std::string::npos ? std::string::npos : e - b));
      b = e == std::string::npos ? all.size() : e + 1;
    }
  }
  for (size_t i = 0; json_lines && i < lines.size(); ++i) {
    try {
      lines[i] = nlohmann::json::parse(lines[i]).get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      UNILLM_THROW(ConfigError, "[eval segment] ", file, " line ", i + 1,
                   ": expected a JSON string (", e.what(), ")");
    }
  }
  for (const auto& l : lines) {
    nlohmann::json words = nlohmann::json::array();
    for (auto& w : jieba.cut_utf8(l)) words.push_back(std::move(w));
    std::printf("%s\n",
                words.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace

int cmd_eval(const std::vector<std::string>& args) {
  const char* usage =
      "usage: unillm eval ppl --model DIR --file TEXT [--max-length N] [--stride S] [--json]\n"
      "       unillm eval reward --model DIR [--adapter DIR] --file PAIRS.json [--template NAME] "
      "[--json]\n"
      "       unillm eval bleu|rouge|similarity --predictions generated_predictions.jsonl "
      "[--jieba-dir DIR]\n"
      "       unillm eval choice --model DIR --task mmlu_test --task_dir DIR [--template NAME] [--lang en|zh] "
      "[--n_shot 5] [--save_dir DIR]\n"
      "       unillm eval CONFIG.yaml   (llamafactory-cli eval's config: task, task_dir, n_shot, ...)\n";
  const std::string sub = args.empty() ? "" : args[0];
  const std::vector<std::string> rest(args.begin() + (args.empty() ? 0 : 1), args.end());
  if (sub == "ppl") return eval_ppl(rest);
  if (sub == "reward") return eval_reward(rest);
  if (sub == "bleu" || sub == "rouge" || sub == "similarity") return eval_similarity(sub, rest);
  if (sub == "segment") return eval_segment(rest);
  if (sub == "choice") return eval_choice(rest);
  if (sub.ends_with(".yaml") || sub.ends_with(".yml") || sub.ends_with(".json")) return eval_choice_config(sub, rest);
  std::fputs(usage, stderr);
  return 2;
}

}  // namespace unillm::cli
