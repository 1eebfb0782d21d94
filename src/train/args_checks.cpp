// Cross-key rules of LLaMA-Factory's parser and HF TrainingArguments.__post_init__, and the
// model path resolution through the local Hugging Face cache.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "core/error.h"
#include "data/corpus_data.h"
#include "train/args_internal.h"

namespace unillm::train {
namespace fs = std::filesystem;

namespace detail {

namespace {

void check_implemented(const std::string& where, const std::set<std::string>& given,
                       const char* key, const std::string& value,
                       const std::vector<std::string>& implemented) {
  std::string list;
  for (const auto& v : implemented) {
    if (value == v) return;
    list += (list.empty() ? "" : " | ") + v;
  }
  UNILLM_THROW(NotImplemented, "[config] ", where, ": ", key, " '", value, "'",
               given.count(key) ? "" : " (LLaMA-Factory's default when it is not set)",
               " is not implemented yet; implemented: ", list);
}

void check_eval(TrainArgs& a, const std::string& where) {
  if (a.eval_strategy != "no") a.do_eval = true;                                    // HF
  if (a.eval_strategy == "steps" && !a.eval_steps) a.eval_steps = a.logging_steps;  // HF
  if (a.val_size > 1e-6 && a.dataset.empty())
    UNILLM_THROW(ConfigError, "[config] ", where, ": val_size needs a training 'dataset'");
  if (a.val_size > 1e-6 && !a.eval_dataset.empty())
    UNILLM_THROW(ConfigError, "[config] ", where, ": val_size cannot be used with eval_dataset");
  if (a.do_eval && a.eval_dataset.empty() && a.val_size <= 1e-6 && a.dataset_name_or_path.empty() &&
      (a.input_dir.empty() || data::parse_split(a.split)[1] <= 0))
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": evaluation (do_eval / eval_strategy) needs eval_dataset or val_size",
                 a.input_dir.empty() ? "" : " (or a valid weight in split)");
}

void check_scheduler(const TrainArgs& a, const std::string& where) {
  const auto& k = a.lr_scheduler_kwargs;
  if (k.warmup_lr_rate && a.lr_scheduler_type != "cosine_warmup_with_min_lr")
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": lr_scheduler_kwargs warmup_lr_rate applies only to lr_scheduler_type cosine_warmup_with_min_lr");
  if (a.lr_scheduler_type == "cosine_with_min_lr" || a.lr_scheduler_type == "cosine_warmup_with_min_lr") {
    if (k.min_lr.has_value() == k.min_lr_rate.has_value())
      UNILLM_THROW(ConfigError, "[config] ", where,
                   ": lr_scheduler_type ", a.lr_scheduler_type, " needs "
                   "exactly one of lr_scheduler_kwargs min_lr or min_lr_rate");
    return;
  }
  const bool plateau = a.lr_scheduler_type == "reduce_lr_on_plateau";
  if (k.min_lr_rate || (k.min_lr && !plateau))
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": lr_scheduler_kwargs min_lr/min_lr_rate apply "
                 "only to lr_scheduler_type cosine_with_min_lr (and min_lr to reduce_lr_on_plateau)");
  if (!plateau && (k.mode || k.threshold_mode || k.factor || k.threshold || k.eps || k.patience || k.cooldown))
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": lr_scheduler_kwargs mode, factor, patience, threshold, threshold_mode, cooldown and eps apply "
                 "only to lr_scheduler_type reduce_lr_on_plateau");
  if (plateau && a.eval_strategy == "no")  // HF's TrainingArguments check
    UNILLM_THROW(ConfigError, "[config] ", where, ": lr_scheduler_type reduce_lr_on_plateau requires an eval strategy");
  const std::string& type = a.lr_scheduler_type;
  const bool wsd = type == "warmup_stable_decay";
  if (k.num_cycles && type != "cosine" && type != "cosine_with_restarts" && !wsd)
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": lr_scheduler_kwargs num_cycles applies only "
                 "to the cosine schedules and warmup_stable_decay");
  if ((k.lr_end || k.power) && type != "polynomial")
    UNILLM_THROW(ConfigError, "[config] ", where, ": lr_scheduler_kwargs lr_end and power apply only to lr_scheduler_type "
                 "polynomial");
  if (type == "polynomial" && k.lr_end.value_or(1e-7) >= a.learning_rate)  // HF's check
    UNILLM_THROW(ConfigError, "[config] ", where, ": lr_scheduler_kwargs lr_end (", k.lr_end.value_or(1e-7),
                 ") must be smaller than learning_rate (", a.learning_rate, ")");
  if (!wsd && (k.num_decay_steps || k.num_stable_steps || k.warmup_type || k.decay_type || k.min_lr_ratio))
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": lr_scheduler_kwargs num_decay_steps, num_stable_steps, warmup_type, decay_type and "
                 "min_lr_ratio apply only to lr_scheduler_type warmup_stable_decay");
  if (wsd && !k.num_decay_steps)  // transformers' get_wsd_schedule has no default for it
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": lr_scheduler_type warmup_stable_decay needs lr_scheduler_kwargs num_decay_steps");
}

// HF TrainingArguments.__post_init__'s rules for the best checkpoint (see args.h).
void check_best_model(TrainArgs& a, const std::string& where) {
  if (a.lr_scheduler_type == "reduce_lr_on_plateau" && a.metric_for_best_model.empty())
    a.metric_for_best_model = "loss";  // HF's __post_init__: the plateau scheduler steps with it
  if (a.save_strategy == "best") {  // HF's Trainer.__init__ and DefaultFlowCallback
    if (a.metric_for_best_model.empty() && !a.load_best_model_at_end)
      UNILLM_THROW(ConfigError, "[config] ", where,
                   ": save_strategy best needs metric_for_best_model (as HF): the checkpoints are the evaluations "
                   "that improve it");
    if (a.eval_strategy == "no" && !a.do_eval)
      UNILLM_THROW(ConfigError, "[config] ", where,
                   ": save_strategy best saves at evaluations, and eval_strategy is no");
  }
  if (a.load_best_model_at_end) {
    if (a.metric_for_best_model.empty()) a.metric_for_best_model = "loss";  // HF's default
    // do_eval without a strategy evaluates every eval_steps (PaddleNLP resets it to steps).
    const std::string eval = a.eval_strategy == "no" && a.do_eval ? "steps" : a.eval_strategy;
    if (eval != a.save_strategy && a.save_strategy != "best")  // HF exempts best
      UNILLM_THROW(
          ConfigError, "[config] ", where,
          ": load_best_model_at_end needs save_strategy and eval_strategy to match (as HF), got "
          "save_strategy '",
          a.save_strategy, "' and eval_strategy '", eval, "'");
    const double save = a.save_steps, every = a.eval_steps.value_or(a.logging_steps);
    // Whole steps, or both fractions of the total (compared in millionths, as HF does).
    const bool fractions = save < 1 && every < 1;
    const auto s = static_cast<int64_t>(std::llround(fractions ? save * 1e6 : save));
    const auto e = static_cast<int64_t>(std::llround(fractions ? every * 1e6 : every));
    // e is 0 for an eval fraction below 5e-7: refused rather than divided by.
    if (eval == "steps" && a.save_strategy != "best" && ((save < 1) != (every < 1) || e == 0 || s % e != 0))
      UNILLM_THROW(ConfigError, "[config] ", where,
                   ": load_best_model_at_end needs save_steps to be a round multiple of eval_steps "
                   "(as HF), got ",
                   save, " and ", every);
  }
  // eval_on_each_dataset: HF names each evaluation eval_<name>_*, so the metric names a dataset
  // (HF's KeyError at the first save becomes an error before training).
  std::string each;  // metric_for_best_model without "<name>_"
  if (a.eval_on_each_dataset && !a.eval_dataset.empty() && !a.metric_for_best_model.empty()) {
    each = dataset_metric(a.metric_for_best_model, a.eval_dataset).second;
    if (each.empty()) {
      std::string choices;
      for (const std::string& n : a.eval_dataset) choices += (choices.empty() ? "" : ", ") + n + "_loss";
      UNILLM_THROW(ConfigError, "[config] ", where, ": metric_for_best_model '", a.metric_for_best_model,
                   "' names no evaluation: with eval_on_each_dataset each dataset is evaluated as eval_<name>_*, "
                   "so name one (", choices, ", ...)");
    }
  }
  // A preference stage's logged metrics may decide too (HF takes any eval_ key).
  const std::string& m = each.empty() ? a.metric_for_best_model : each;
  if (m.find('/') == std::string::npos && m != "kl" && m.find('_') != std::string::npos)
    UNILLM_THROW(ConfigError, "[config] ", where, ": metric_for_best_model '", m,
                 "' is not a metric: expected loss, perplexity, accuracy or a stage metric (a dataset's "
                 "<name>_<metric> needs eval_on_each_dataset with that name in eval_dataset)");
  if ((a.stage == "dpo" || a.stage == "kto") && (m == "accuracy" || m == "perplexity"))
    UNILLM_THROW(ConfigError, "[config] ", where, ": metric_for_best_model '", m, "' is not evaluated by stage ",
                 a.stage, " (its metrics: loss, rewards/accuracies, rewards/margins, ...)");
  if (m.find('/') != std::string::npos || m == "kl") {
    std::vector<std::string> known;
    if (a.stage == "dpo" || a.stage == "kto")
      known = {"rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected",
               "logits/chosen", "logits/rejected"};
    if (a.stage == "dpo") known.push_back("rewards/accuracies");
    if (a.stage == "kto") known.push_back("kl");
    if (std::find(known.begin(), known.end(), m) == known.end())
      UNILLM_THROW(ConfigError, "[config] ", where, ": metric_for_best_model '", m, "' is not a metric stage ",
                   a.stage, " evaluates", known.empty() ? std::string(" (loss, perplexity or accuracy)") : "");
  }
  if (!a.metric_for_best_model.empty() && !a.greater_is_better) {  // HF: true unless it names a loss
    const std::string& full = a.metric_for_best_model;
    a.greater_is_better = !(full.size() >= 4 && full.compare(full.size() - 4, 4, "loss") == 0);
  }
}

// do_predict: on an input_dir corpus, the loss over the test part of split (run_pretrain.py; its
// check_data_split refuses a zero test weight); on LLaMA-Factory data, generation with
// predict_with_generate (its parser's rules: stage sft, predictions need it, eval_dataset).
void check_predict(const TrainArgs& a, const std::string& where) {
  if (a.predict_with_generate && a.stage != "sft")
    UNILLM_THROW(ConfigError, "[config] ", where, ": predict_with_generate needs stage: sft (LLaMA-Factory)");
  if (a.predict_with_generate && a.do_eval)
    UNILLM_THROW(NotImplemented, "[config] ", where,
                 ": predict_with_generate with evaluation (do_eval / eval_strategy): generating during "
                 "evaluation is not implemented; do_predict generates and scores the eval_dataset");
  if (!a.do_predict) return;
  if (a.input_dir.empty()) {
    if (!a.predict_with_generate)
      UNILLM_THROW(ConfigError, "[config] ", where,
                   ": do_predict on LLaMA-Factory datasets needs predict_with_generate: true (as LLaMA-Factory: "
                   "\"Please enable `predict_with_generate` to save model predictions\")");
    if (a.eval_dataset.empty())
      UNILLM_THROW(ConfigError, "[config] ", where,
                   ": do_predict needs eval_dataset (the prompts to answer; a val_size split is not predicted)");
    return;
  }
  if (a.predict_with_generate)
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": predict_with_generate answers eval_dataset prompts; an input_dir corpus has none");
  if (data::parse_split(a.split)[2] <= 0)
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": do_predict needs a test weight in split (its third part), got '", a.split, "'");
}

// Stage dpo: pairs are never packed; PaddleNLP data has no pairs; the reference is the initial
// policy (or ref_model), which a random model does not have.
void check_preference(const TrainArgs& a, const std::string& where) {
  const bool reference = a.stage == "dpo" || a.stage == "kto";
  if (!reference && (!a.ref_model.empty() || !a.ref_model_adapters.empty()))
    UNILLM_THROW(ConfigError, "[config] ", where, ": ref_model / ref_model_adapters are used by stages dpo and kto only");
  if ((reference || a.stage == "rm") && (!a.dataset_name_or_path.empty() || !a.input_dir.empty()))
    UNILLM_THROW(ConfigError, "[config] ", where, ": stage ", a.stage,
                 " reads LLaMA-Factory datasets (dataset + dataset_dir), not dataset_name_or_path or input_dir");
  if (!reference) return;
  if (a.train_from_scratch)
    UNILLM_THROW(ConfigError, "[config] ", where, ": stage ", a.stage, " with train_from_scratch (a random policy "
                 "has no meaningful reference); start from a trained model");
  if (!a.ref_model_adapters.empty() && a.ref_model.empty())
    UNILLM_THROW(ConfigError, "[config] ", where, ": ref_model_adapters needs ref_model (LLaMA-Factory)");
  // LLaMA-Factory quantises only a ref_model it loads (the copy of the policy keeps its weights).
  if (a.ref_model_quantization_bit > 0 && a.ref_model.empty())
    UNILLM_THROW(ConfigError, "[config] ", where, ": ref_model_quantization_bit applies to ref_model, which is not set "
                 "(LLaMA-Factory quantises only a ref_model it loads)");
  if (a.ref_model_quantization_bit > 0 && a.ref_model_adapters.size() > 1)
    UNILLM_THROW(ConfigError, "[config] ", where, ": ref_model_quantization_bit takes one ref_model_adapters entry, got ",
                 a.ref_model_adapters.size(), " (LLaMA-Factory: a quantised model accepts a single adapter, unmerged)");
  if (a.stage == "kto") {
    if (a.ld_alpha) UNILLM_THROW(ConfigError, "[config] ", where, ": ld_alpha is used by stage dpo only");
    return;
  }
  if (a.dpo_label_smoothing > 0 && a.pref_loss != "sigmoid")
    UNILLM_THROW(ConfigError, "[config] ", where, ": dpo_label_smoothing is only valid with pref_loss: sigmoid (got ",
                 a.pref_loss, ")");
  if (a.pref_ftx > 1e-6 && a.pref_loss == "kto_pair")
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": pref_ftx with pref_loss kto_pair (LLaMA-Factory cannot add its 2B losses to the B sft terms)");
  if (a.pref_bco_weight > 1e-6 && a.pref_loss == "kto_pair")
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": pref_bco_weight with pref_loss kto_pair (LLaMA-Factory cannot add its 2B losses to the B BCO terms)");
  if (a.pref_bco_weight > 1e-6 && (a.pref_loss == "orpo" || a.pref_loss == "simpo"))
    UNILLM_THROW(ConfigError, "[config] ", where, ": pref_bco_weight with pref_loss ", a.pref_loss,
                 ", which has no reference model (LLaMA-Factory would ignore the weight)");
}

}  // namespace

void finish_args(TrainArgs& a, const std::string& where, const std::set<std::string>& given,
                 Problems& problems) {
  // Each rule runs even when an earlier one failed, so one run reports them all; a rule that
  // reads a key which itself failed sees its default instead.
  auto rule = [&](auto&& fn) { problems.attempt(fn); };
  // HF's train_batch_size / eval_batch_size properties: the deprecated spelling wins when set.
  for (auto [gpu, device, name] : {std::tuple{&a.per_gpu_train_batch_size, &a.per_device_train_batch_size, "train"},
                                   std::tuple{&a.per_gpu_eval_batch_size, &a.per_device_eval_batch_size, "eval"}})
    if (gpu->has_value()) {
      *device = **gpu;
      a.warnings.push_back(UNILLM_MSG("[config] ", where, ": per_gpu_", name, "_batch_size is deprecated (as in "
                                      "transformers); using it as per_device_", name, "_batch_size = ", **gpu));
    }
  if (a.model_name_or_path.empty() && !given.count("model_name_or_path"))
    problems.add(UNILLM_MSG("[config] ", where, ": model_name_or_path is required"), true);
  const bool stage_ok = problems.attempt(
      [&] { check_implemented(where, given, "stage", a.stage, {"pt", "sft", "rm", "dpo", "kto"}); });
  rule([&] { check_implemented(where, given, "finetuning_type", a.finetuning_type, {"lora", "oft", "freeze", "full"}); });
  if (stage_ok) rule([&] { check_preference(a, where); });
  if (stage_ok && a.label_smoothing_factor > 0 && a.stage != "pt" && a.stage != "sft")
    problems.add(UNILLM_MSG("[config] ", where, ": label_smoothing_factor with stage ", a.stage,
                            " is not implemented (HF's LabelSmoother smooths the token loss of pt and sft)"),
                 false);
  if (a.label_smoothing_factor > 0 && (a.use_dft_loss || a.use_eaft_loss || a.use_asft_loss))
    problems.add(UNILLM_MSG("[config] ", where, ": label_smoothing_factor with use_dft_loss, use_eaft_loss or "
                            "use_asft_loss is not implemented (in HF the custom loss replaces the smoother)"),
                 false);
  if (a.early_stopping_steps && !a.load_best_model_at_end)  // HF's EarlyStoppingCallback asserts it
    problems.add(UNILLM_MSG("[config] ", where, ": early_stopping_steps needs load_best_model_at_end: true (HF's "
                            "EarlyStoppingCallback compares evaluations through metric_for_best_model)"),
                 true);
  // LLaMA-Factory's DataArguments checks.
  if (!a.interleave_probs.empty() && a.mix_strategy == "concat")
    problems.add(UNILLM_MSG("[config] ", where, ": interleave_probs is only valid for interleaved mixing "
                            "(mix_strategy interleave_under or interleave_over)"),
                 true);
  if (!a.interleave_probs.empty() && a.interleave_probs.size() != a.dataset.size() && !a.dataset.empty())
    problems.add(UNILLM_MSG("[config] ", where, ": interleave_probs has ", a.interleave_probs.size(),
                            " entries for ", a.dataset.size(), " datasets (they must be as many)"),
                 true);
  if (stage_ok && a.mix_strategy != "concat" && a.stage != "pt" && a.stage != "sft")
    problems.add(UNILLM_MSG("[config] ", where, ": mix_strategy ", a.mix_strategy, " with stage ", a.stage,
                            " is not implemented (the pt and sft readers interleave; pairs and feedback data concatenate)"),
                 false);
  if (stage_ok && a.neftune_noise_alpha > 0 && a.stage != "pt" && a.stage != "sft")
    problems.add(UNILLM_MSG("[config] ", where, ": neftune_noise_alpha with stage ", a.stage,
                            " is not implemented (NEFTune runs in the token-loss stages, pt and sft)"),
                 false);
  finish_finetune_args(a, where, problems);
  if (!a.packing_given) a.packing = a.stage == "pt";  // LLaMA-Factory's parser
  if (a.data_cutoff_len() < 1)
    problems.add(UNILLM_MSG("[config] ", where,
                            ": cutoff_len must be >= 2 with packing: true "
                            "(LLaMA-Factory packs blocks of cutoff_len - 1 then)"),
                 true);
  if (a.do_train && a.dataset.empty() && a.dataset_name_or_path.empty() && a.input_dir.empty() &&
      a.v1_train_dataset.empty() && !given.count("dataset"))
    problems.add(UNILLM_MSG("[config] ", where, ": do_train needs a training 'dataset'"), true);
  rule([&] { check_eval(a, where); });
  if (stage_ok) rule([&] { check_best_model(a, where); });
  rule([&] { check_predict(a, where); });
  rule([&] { check_scheduler(a, where); });
  if (a.bf16 && a.fp16)
    problems.add(UNILLM_MSG("[config] ", where,
                            ": bf16 and fp16 are both true; set at most one (as HF TrainingArguments)"),
                 true);
  if (!a.do_train && !a.do_eval && !a.do_predict && a.use == ConfigUse::kTrain)
    a.warnings.push_back(
        UNILLM_MSG("[config] ", where, ": neither do_train nor do_eval is set: nothing to do"));
}

}  // namespace detail

std::string resolve_model_path(const std::string& name_or_path, const std::string& hf_cache_root) {
  if (name_or_path.empty()) UNILLM_THROW(ConfigError, "[config] model_name_or_path is empty");
  if (fs::is_directory(name_or_path)) return name_or_path;
  const size_t slash = name_or_path.find('/');
  const bool hub_id = slash != std::string::npos && slash > 0 &&
                      name_or_path.find('/', slash + 1) == std::string::npos &&
                      slash + 1 < name_or_path.size() && name_or_path[0] != '.' &&
                      name_or_path[0] != '~';
  if (!hub_id)
    UNILLM_THROW(ConfigError, "[config] model_name_or_path '", name_or_path,
                 "': no such directory (and not a hub id org/name)");
  std::string repo =
      "models--" + name_or_path.substr(0, slash) + "--" + name_or_path.substr(slash + 1);
  fs::path base = fs::path(hf_cache_root) / repo;
  std::ifstream ref(base / "refs" / "main");
  std::string hash;
  if (ref) std::getline(ref, hash);
  while (!hash.empty() && (hash.back() == '\r' || hash.back() == ' ')) hash.pop_back();
  fs::path snap = base / "snapshots" / hash;
  if (hash.empty() || !fs::is_directory(snap))
    UNILLM_THROW(ConfigError, "[config] model_name_or_path '", name_or_path,
                 "': not a local directory and not in the Hugging Face cache (looked for ",
                 (base / "refs" / "main").string(),
                 " and its snapshot); unillm never downloads: "
                 "fetch it first (e.g. `huggingface-cli download ",
                 name_or_path, "`) or give a local path");
  return snap.string();
}

std::pair<std::string, std::string> dataset_metric(const std::string& metric, const std::vector<std::string>& names) {
  std::string name;
  for (const std::string& n : names)
    if (metric.size() > n.size() + 1 && metric.rfind(n + "_", 0) == 0 && n.size() > name.size()) name = n;
  if (name.empty()) return {"", ""};
  return {name, metric.substr(name.size() + 1)};
}

}  // namespace unillm::train
