// Setters and rules of LLaMA-Factory keys that change how a run is set up: tokenized_path
// (data/tokenized_data.h), gradient_checkpointing_kwargs (unillm's recompute has one form),
// pure_bf16 (trained as bf16 mixed precision), train_sampling_strategy, shift_attn (S²-Attn,
// nn/shift_attention.h), adapter_folder (the adapters' subfolder) and bf16/fp16_full_eval.
#include <filesystem>
#include <map>

#include "core/error.h"
#include "train/args_internal.h"

namespace unillm::train::detail {

namespace {

// HF TrainingArguments takes a dict, or a JSON string of one (its _VALID_DICT_FIELDS).
YAML::Node kwargs_map(const Field& f) {
  YAML::Node n = f.node;
  if (n.IsScalar() && !n.Scalar().empty() && n.Scalar()[0] == '{') {
    try {
      n = YAML::Load(n.Scalar());
    } catch (const YAML::Exception&) {
      bad_value(f, "a mapping such as {use_reentrant: false}");
    }
  }
  if (!n.IsNull() && !n.IsMap()) bad_value(f, "a mapping such as {use_reentrant: false}");
  return n;
}

// torch.utils.checkpoint's use_reentrant chooses between two implementations of the same
// recompute; unillm's per-layer recompute (nn) is one implementation, so the flag changes
// nothing. The other kwargs (preserve_rng_state, determinism_check, debug, context_fn) would
// change behaviour and are refused by name.
void set_checkpointing_kwargs(TrainArgs& a, const Field& f) {
  const YAML::Node n = kwargs_map(f);
  if (n.IsNull() || n.size() == 0) return;
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    if (k != "use_reentrant")
      not_implemented(f, "entry '" + k + "' (only use_reentrant is accepted)");
    get_bool(Field{f.key + ".use_reentrant", kv.second, f.where});
  }
  a.warnings.push_back("[config] " + f.where +
                       ": gradient_checkpointing_kwargs: use_reentrant has no meaning for unillm's "
                       "per-layer recompute (one implementation, same gradients); accepted and "
                       "ignored");
}

using Setter = void (*)(TrainArgs&, const Field&);

const std::map<std::string, Setter>& misc_setters() {
  static const std::map<std::string, Setter> m = {
      {"tokenized_path",
       [](TrainArgs& a, const Field& f) {
         a.tokenized_path = f.node.IsNull() ? "" : get_string(f);
       }},
      {"gradient_checkpointing_kwargs", set_checkpointing_kwargs},
      {"pure_bf16", [](TrainArgs& a, const Field& f) { a.pure_bf16 = get_bool(f); }},
      {"shift_attn", [](TrainArgs& a, const Field& f) { a.shift_attn = get_bool(f); }},
      {"mixture_of_depths",
       [](TrainArgs& a, const Field& f) {
         a.mixture_of_depths = f.node.IsNull() ? "" : get_choice(f, {"convert", "load"});
         a.mixture_of_depths_where = f.where;
       }},
      {"bf16_full_eval", [](TrainArgs& a, const Field& f) { a.bf16_full_eval = get_bool(f); }},
      {"logging_first_step", [](TrainArgs& a, const Field& f) { a.logging_first_step = get_bool(f); }},
      {"fp16_full_eval", [](TrainArgs& a, const Field& f) { a.fp16_full_eval = get_bool(f); }},
      {"adapter_folder",
       [](TrainArgs& a, const Field& f) {
         a.adapter_folder = f.node.IsNull() ? "" : get_string(f);
         a.adapter_folder_where = f.where;
       }},
      {"train_sampling_strategy",
       [](TrainArgs& a, const Field& f) {
         a.train_sampling_strategy = get_choice(f, {"random", "sequential", "group_by_length"});
       }},
  };
  return m;
}

}  // namespace

bool set_misc_field(TrainArgs& a, const Field& f) {
  const auto& m = misc_setters();
  auto it = m.find(f.key);
  if (it == m.end()) return false;
  it->second(a, f);
  return true;
}

void finish_misc_args(TrainArgs& a, const std::string& where, Problems& problems) {
  auto fail = [&](const std::string& s) { problems.add("[config] " + where + ": " + s, true); };
  finish_vocab_args(a, where);
  if (a.pure_bf16 && a.fp16) {
    // LLaMA-Factory does not check this pair: its compute dtype becomes bf16 (pure_bf16 wins) while
    // HF still runs fp16's loss scaler over bf16 weights. unillm refuses the contradiction.
    fail("pure_bf16 trains in bf16; fp16: true asks for fp16 mixed precision: set one of them");
  } else if (a.pure_bf16) {
    a.bf16 = true;
    a.warnings.push_back(
        "[config] " + where +
        ": pure_bf16 trains as bf16: true with f32 trainable weights, gradients and optimizer "
        "state (LLaMA-Factory keeps them in bf16): more memory than LLaMA-Factory's, never less "
        "accuracy");
  }
  // transformers 5 replaced group_by_length (and the sampler LLaMA-Factory's disable_shuffling
  // picks) with one key; a config that says both ways must agree.
  const std::string& s = a.train_sampling_strategy;
  if (!s.empty()) {
    if (a.group_by_length && s != "group_by_length")
      fail("train_sampling_strategy: " + s + " contradicts group_by_length: true");
    else if (a.disable_shuffling && s != "sequential")
      fail("train_sampling_strategy: " + s + " contradicts disable_shuffling: true (sequential)");
    a.group_by_length = a.group_by_length || s == "group_by_length";
    a.disable_shuffling = a.disable_shuffling || s == "sequential";
  }
  // PEFT's from_pretrained(path, subfolder=adapter_folder), which LLaMA-Factory passes for every
  // adapter it loads (adapter_name_or_path, and ref_model_adapters through its copied arguments).
  if (!a.adapter_folder.empty()) {
    if (a.adapter_name_or_path.empty() && a.ref_model_adapters.empty())
      a.warnings.push_back("[config] " + a.adapter_folder_where +
                           ": adapter_folder applies to adapter_name_or_path and ref_model_adapters; none is given");
    for (auto* list : {&a.adapter_name_or_path, &a.ref_model_adapters})
      for (std::string& p : *list) p = (std::filesystem::path(p) / a.adapter_folder).string();
  }
  if (a.bf16_full_eval && a.fp16_full_eval)  // HF would take fp16 silently
    fail("bf16_full_eval and fp16_full_eval are both set: set one of them");
  if (a.use == ConfigUse::kTrain && a.do_train && (a.bf16_full_eval || a.fp16_full_eval))
    fail(std::string(a.bf16_full_eval ? "bf16" : "fp16") +
         "_full_eval with do_train is not implemented: HF casts the model only for an evaluation or predict "
         "outside training, and unillm evaluates the final step inside training (run the evaluation as its own "
         "config with do_train: false)");
  // The reference would be the policy with its adapters off, which attends through S²-Attn in
  // training (Reference::logps); its groups depend on each training batch's padded length.
  if (a.use == ConfigUse::kTrain && a.shift_attn && a.ref_mode == "precompute" && a.adapter_tuning() &&
      a.ref_model.empty() && (a.stage == "kto" || (a.stage == "dpo" && a.pref_loss != "orpo" && a.pref_loss != "simpo")))
    fail("shift_attn with ref_mode precompute under LoRA: the reference (the policy with its adapters off) attends "
         "through S²-Attn groups of a quarter of each training batch's padded length, which a table computed before "
         "training cannot know; use ref_mode auto");
  if (!a.mixture_of_depths.empty() && a.use == ConfigUse::kTrain) {
    // The package's routed layers count their training calls and route by a top-k over each
    // padded row; what unillm has not matched against it is refused here.
    const std::string at = "[config] " + a.mixture_of_depths_where + ": mixture_of_depths with ";
    auto refuse = [&](const std::string& what) { problems.add(at + what, true); };
    if (a.stage != "pt" && a.stage != "sft")
      refuse("stage " + a.stage + " is not implemented (pt and sft are; the preference and reward stages' extra "
             "forwards would advance the routed layers' capacity counter as the package's do, unverified)");
    if (a.tensor_degree > 1 || a.pipeline_degree > 1 || a.context_degree > 1 || a.expert_degree > 1)
      refuse("tensor, pipeline, context or expert parallelism is not implemented (data parallelism and ZeRO are)");
    if (a.neat_packing) refuse("neat_packing is not implemented (the package slices 4-D causal masks only)");
    if (a.shift_attn) refuse("shift_attn is not implemented");
    if (a.do_predict && a.predict_with_generate)
      refuse("predict_with_generate is not implemented (generation through routed layers is not built); "
             "do_predict without it scores the test rows");
  }
  if (a.eval_on_each_dataset && a.eval_dataset.empty() && (a.do_eval || a.eval_strategy != "no"))
    a.warnings.push_back("[config] " + where + ": eval_on_each_dataset applies to eval_dataset's datasets; the "
                         "evaluation set here (val_size) is evaluated as one (as LLaMA-Factory)");
  if (!a.tokenized_path.empty() && a.eval_on_each_dataset && !a.eval_dataset.empty())
    fail("tokenized_path with eval_on_each_dataset is not implemented yet (the saved rows hold one evaluation "
         "set); drop one of them");
  if (!a.tokenized_path.empty() && !a.input_dir.empty())
    fail(
        "tokenized_path with input_dir: an input_dir corpus is already tokenized (unillm "
        "preprocess); drop one of them");
}

}  // namespace unillm::train::detail
