// do_predict with predict_with_generate (predict.h).
#include "cli/predict.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/eval_support.h"
#include "core/error.h"
#include "data/error.h"
#include "data/predict_data.h"
#include "data/sft.h"
#include "dist/gather_strings.h"
#include "eval/similarity.h"
#include "infer/batch_generate.h"
#include "io/json_file.h"

namespace unillm::cli {

namespace fs = std::filesystem;

namespace {

// A string as Python's json.dumps(ensure_ascii=False) writes it (invalid UTF-8 → U+FFFD).
std::string json_str(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// HF's save_metrics: NAME_results.json, and all_results.json updated (indent 4, keys sorted).
void save_metrics(const fs::path& dir, const std::vector<std::pair<std::string, double>>& metrics) {
  auto write = [](const fs::path& path, const std::vector<std::pair<std::string, double>>& kv) {
    std::vector<std::pair<std::string, double>> sorted = kv;
    std::sort(sorted.begin(), sorted.end());
    std::string out = "{\n";
    for (size_t i = 0; i < sorted.size(); ++i)
      out += "    " + json_str(sorted[i].first) + ": " + py_float(sorted[i].second) + (i + 1 < sorted.size() ? ",\n" : "\n");
    io::write_file_atomic(path.string(), out + "}");
  };
  write(dir / "predict_results.json", metrics);
  std::vector<std::pair<std::string, double>> all;
  if (fs::exists(dir / "all_results.json")) {
    const auto j = io::read_json_file((dir / "all_results.json").string());
    for (const auto& [k, v] : j.items())
      if (v.is_number() && std::none_of(metrics.begin(), metrics.end(), [&k = k](const auto& m) { return m.first == k; }))
        all.emplace_back(k, v.get<double>());
  }
  all.insert(all.end(), metrics.begin(), metrics.end());
  write(dir / "all_results.json", all);
}

}  // namespace

void predict_with_generate(const train::TrainArgs& a, bool after_training, dist::ProcessGroup* group) {
  const int rank = group ? group->rank() : 0, size = group ? group->size() : 1;
  auto say = [rank](const std::string& s) {
    if (rank == 0) std::fprintf(stderr, "[predict] %s\n", s.c_str());
  };
  std::string base = train::resolve_model_path(a.model_name_or_path, hf_cache_root());
  std::vector<std::string> adapters = a.adapter_name_or_path;
  if (after_training && a.adapter_tuning()) {
    // The trained adapter continues the last given one unless create_new_adapter (finetune.cpp).
    if (!a.create_new_adapter && !adapters.empty()) adapters.pop_back();
    adapters.push_back(a.output_dir);
  } else if (after_training) {
    base = a.output_dir;
    adapters.clear();
  }
  LoadedModel m = load_model(base, adapters, a.device, nullptr);
  const io::Tokenizer& tok = *m.tokenizer;
  const std::string tokenizer_dir = after_training && !a.adapter_tuning() ? a.output_dir : base;
  const auto choice = data::choose_template(a.template_name, tokenizer_dir);
  auto tmpl = data::make_chat_template(choice, tok, train::template_options(a, choice.options));

  data::DataOptions dopt = train::data_options(a);
  dopt.cutoff_len = a.cutoff_len;  // LLaMA-Factory's unsupervised processor: cutoff_len as given
  const data::PredictData pd = data::load_predict_data(dopt, *tmpl, tmpl->eos_id());
  if (pd.examples.empty()) UNILLM_THROW(data::DataError, "[predict] eval_dataset holds no example");
  if (pd.skipped_records > 0) say("skipped " + std::to_string(pd.skipped_records) + " bad records");

  // LLaMA-Factory's GeneratingArguments, its defaults where the config is silent (its predict
  // passes them over generation_config.json).
  const train::GeneratingKeys& g = a.generating;
  infer::BatchGenerateOptions bo;
  const bool sample = g.do_sample.value_or(true);
  bo.generate.sampling.temperature = sample ? static_cast<float>(g.temperature.value_or(0.95)) : 0.0f;
  bo.generate.sampling.top_p = static_cast<float>(g.top_p.value_or(0.7));
  bo.generate.sampling.top_k = static_cast<int>(g.top_k.value_or(50));
  bo.generate.sampling.repetition_penalty = static_cast<float>(g.repetition_penalty.value_or(1.0));
  bo.generate.seed = static_cast<uint64_t>(a.seed);
  bo.generate.eos_ids = tmpl->stop_ids();
  bo.max_num_seqs = std::max<int64_t>(1, a.per_device_eval_batch_size);
  std::vector<std::vector<int32_t>> prompts;
  int64_t longest = 0;
  for (const auto& e : pd.examples) {
    prompts.push_back(e.prompt);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(e.prompt.size()));
  }
  const int64_t window = m.model->config().max_position_embeddings;
  int64_t max_new = g.max_new_tokens.value_or(1024);
  if (longest + max_new > window) {
    const int64_t capped = std::max<int64_t>(1, window - longest);
    say("max_new_tokens " + std::to_string(max_new) + " capped to " + std::to_string(capped) +
        " (the longest prompt, " + std::to_string(longest) + " tokens, + max_new_tokens must fit max_position_embeddings " +
        std::to_string(window) + ")");
    max_new = capped;
  }
  bo.generate.max_new_tokens = max_new;
  say(std::to_string(prompts.size()) + " prompts, template '" + choice.name + "', " +
      (sample ? "sampling" : "greedy") + ", max_new_tokens " + std::to_string(max_new) +
      (size > 1 ? ", shared by " + std::to_string(size) + " processes" : ""));
  const auto t0 = std::chrono::steady_clock::now();
  // This process's share: every size-th prompt from its rank on (lengths stay mixed), each with
  // the seed it has in the whole set, so the share's tokens are the one-process run's.
  std::vector<std::vector<int32_t>> mine;
  bo.seeds.clear();
  for (size_t i = static_cast<size_t>(rank); i < prompts.size(); i += static_cast<size_t>(size)) {
    mine.push_back(prompts[i]);
    bo.seeds.push_back(bo.generate.seed + i);
  }
  const auto generated = infer::batch_generate(*m.model, mine, bo);
  std::vector<std::vector<int32_t>> outputs(prompts.size());
  if (size == 1) {
    outputs = generated;
  } else {  // rank r's k-th answer is prompt r + k·size
    const auto shares = dist::allgather_strings(*group, nlohmann::json(generated).dump());
    for (int r = 0; r < size; ++r) {
      const auto got = nlohmann::json::parse(shares[r]).get<std::vector<std::vector<int32_t>>>();
      for (size_t k = 0; k < got.size(); ++k) outputs.at(static_cast<size_t>(r) + k * static_cast<size_t>(size)) = got[k];
    }
    if (rank != 0) return;
  }
  const double runtime = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // LLaMA-Factory's save_predictions (prompt decoded with special tokens, the others as
  // skip_special_tokens says) and ComputeSimilarity (both decoded without special tokens).
  const bool skip = g.skip_special_tokens.value_or(true);
  const eval::Jieba jieba = eval::Jieba::load(jieba_dir(""));
  std::vector<eval::SampleScores> scores;
  std::string lines;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& e = pd.examples[i];
    const std::string pred = tok.decode(outputs[i], skip), label = tok.decode(e.label, skip);
    lines += "{\"prompt\": " + json_str(tok.decode(e.prompt, false)) + ", \"predict\": " + json_str(pred) +
             ", \"label\": " + json_str(label) + "}\n";
    scores.push_back(eval::score_sample(&jieba, {tok.decode(outputs[i], true), tok.decode(e.label, true)}));
  }
  const eval::SampleScores mean = eval::mean_scores(scores);
  const fs::path out(a.output_dir);
  fs::create_directories(out);
  io::write_file_atomic((out / "generated_predictions.jsonl").string(), lines);
  const double n = static_cast<double>(outputs.size());
  // HF's steps: batches of per_device_eval_batch_size on each process.
  const double steps =
      std::ceil(n / static_cast<double>(std::max<int64_t>(1, a.per_device_eval_batch_size) * size));
  save_metrics(out, {{"predict_bleu-4", mean.bleu4},
                     {"predict_rouge-1", mean.rouge1},
                     {"predict_rouge-2", mean.rouge2},
                     {"predict_rouge-l", mean.rougel},
                     {"predict_runtime", std::round(runtime * 1e4) / 1e4},
                     {"predict_samples_per_second", std::round(n / std::max(runtime, 1e-9) * 1e3) / 1e3},
                     {"predict_steps_per_second", std::round(steps / std::max(runtime, 1e-9) * 1e3) / 1e3}});
  std::printf("predict: %zu prompts, bleu-4 %s, rouge-1 %s, rouge-2 %s, rouge-l %s -> %s\n", outputs.size(),
              py_float(mean.bleu4).c_str(), py_float(mean.rouge1).c_str(), py_float(mean.rouge2).c_str(),
              py_float(mean.rougel).c_str(), (out / "generated_predictions.jsonl").c_str());
}

}  // namespace unillm::cli
