// Typed setters for every implemented key and the cross-key rules (see args.h).
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>

#include "core/error.h"
#include "data/template.h"
#include "train/args_internal.h"
#include "train/key_table.h"
#include "train/optimizer.h"

namespace unillm::train::detail {

std::string show(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  return n.IsSequence() ? "a list" : "a mapping";
}

void not_implemented(const Field& f, const std::string& what) {
  UNILLM_THROW(NotImplemented, "[config] ", f.where, ": key '", f.key, "': ", what,
               " is not implemented yet");
}

// YAML's booleans, and 0 / 1 as HF's argument parsers take them (PaddleNLP's launch scripts and
// argument files write `"zero_padding": 0`, `"sequence_parallel": 1`).
bool get_bool(const Field& f) {
  bool v;
  if (f.node.IsScalar() && (f.node.Scalar() == "0" || f.node.Scalar() == "1")) return f.node.Scalar() == "1";
  if (!f.node.IsScalar() || !YAML::convert<bool>::decode(f.node, v)) bad_value(f, "true or false");
  return v;
}

int64_t get_int(const Field& f, int64_t min) {
  int64_t v;
  if (!f.node.IsScalar() || !YAML::convert<int64_t>::decode(f.node, v))
    bad_value(f, UNILLM_MSG("an integer >= ", min));
  if (v < min) bad_value(f, UNILLM_MSG("an integer >= ", min));
  return v;
}

double get_number(const Field& f, const std::string& range) {
  double v;
  if (!f.node.IsScalar() || !YAML::convert<double>::decode(f.node, v) || !std::isfinite(v))
    bad_value(f, "a number " + range);
  return v;
}

// A number in [lo, hi] (hi_open: [lo, hi)).
double get_number_in(const Field& f, double lo, double hi, bool lo_open, bool hi_open) {
  std::string range = UNILLM_MSG("in ", lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]");
  if (hi == std::numeric_limits<double>::infinity()) range = UNILLM_MSG(lo_open ? "> " : ">= ", lo);
  double v = get_number(f, range);
  if (v < lo || v > hi || (lo_open && v == lo) || (hi_open && v == hi))
    bad_value(f, "a number " + range);
  return v;
}

std::string get_string(const Field& f) {
  if (!f.node.IsScalar()) bad_value(f, "a string");
  return f.node.Scalar();
}

std::vector<std::string> get_list(const Field& f) {
  std::vector<std::string> out;
  auto add = [&](const std::string& s) {
    size_t pos = 0;
    while (pos <= s.size()) {
      size_t c = s.find(',', pos);
      if (c == std::string::npos) c = s.size();
      std::string item = s.substr(pos, c - pos);
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (item.empty()) bad_value(f, "a comma-separated list of names");
      out.push_back(item);
      pos = c + 1;
    }
  };
  if (f.node.IsNull()) return out;
  if (f.node.IsScalar())
    add(f.node.Scalar());
  else if (f.node.IsSequence())
    for (const auto& e : f.node) {
      if (!e.IsScalar()) bad_value(f, "a comma-separated list of names");
      add(e.Scalar());
    }
  else
    bad_value(f, "a comma-separated list of names");
  return out;
}

std::string get_choice(const Field& f, const std::vector<std::string>& choices) {
  std::string v = f.node.IsScalar() ? f.node.Scalar() : "";
  for (const auto& c : choices)
    if (v == c) return v;
  std::string list, near;
  size_t best = std::max<size_t>(3, v.size() / 3) + 1;
  for (const auto& c : choices) {
    list += (list.empty() ? "" : ", ") + c;
    if (size_t d = edit_distance(v, c); d < best) best = d, near = c;
  }
  bad_value(f, "one of " + list + (near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

namespace {

// Step counts above 2^53 are not whole numbers in a double (nor do they fit the int64 they become).
constexpr double kMaxSteps = 9007199254740992.0;

// Interval keys: a whole number of steps >= 1, or a fraction in (0, 1) of the total steps.
double get_steps(const Field& f) {
  double v = get_number(f, "of steps >= 1 or a fraction in (0, 1)");
  if (v <= 0 || (v >= 1 && v != std::floor(v)) || v > kMaxSteps)
    bad_value(f, "a whole number of steps in [1, 2^53] or a fraction in (0, 1)");
  return v;
}

double get_val_size(const Field& f) {
  const char* expected = "a fraction in [0, 1) or a whole count >= 2";
  double v = get_number(f, "");
  // LLaMA-Factory: val_size 1 is the fraction 1.0 (an error in `datasets`), and 2.5 silently
  // becomes int(2.5) = 2; both are refused here.
  if (v < 0 || v == 1.0 || (v > 1 && v != std::floor(v))) bad_value(f, expected);
  return v;
}

void set_lr_kwargs(TrainArgs& a, const Field& f) {
  YAML::Node n = f.node;
  if (n.IsScalar() && !n.Scalar().empty() && n.Scalar()[0] == '{') {  // a JSON string, as HF parses
    try {
      n = YAML::Load(n.Scalar());
    } catch (const YAML::Exception&) {
      bad_value(f, "a mapping such as {min_lr_rate: 0.1}");
    }
  }
  if (n.IsNull()) return;
  if (!n.IsMap()) bad_value(f, "a mapping such as {min_lr_rate: 0.1}");
  for (const auto& kv : n) {
    std::string k = kv.first.as<std::string>();
    Field sub{f.key + "." + k, kv.second, f.where};
    if (k == "min_lr")
      a.lr_scheduler_kwargs.min_lr = get_number_in(sub, 0, INFINITY, false, false);
    else if (k == "min_lr_rate")
      a.lr_scheduler_kwargs.min_lr_rate = get_number_in(sub, 0, 1, false, false);
    else if (k == "num_cycles")
      a.lr_scheduler_kwargs.num_cycles = get_number_in(sub, 0, INFINITY, true, false);
    else if (k == "num_decay_steps")
      a.lr_scheduler_kwargs.num_decay_steps = get_int(sub, 0);
    else if (k == "num_stable_steps")
      a.lr_scheduler_kwargs.num_stable_steps = get_int(sub, 0);
    else if (k == "warmup_type")
      a.lr_scheduler_kwargs.warmup_type = get_choice(sub, {"linear", "cosine", "1-sqrt"});
    else if (k == "decay_type")
      a.lr_scheduler_kwargs.decay_type = get_choice(sub, {"linear", "cosine", "1-sqrt"});
    else if (k == "mode")
      a.lr_scheduler_kwargs.mode = get_choice(sub, {"min", "max"});
    else if (k == "threshold_mode")
      a.lr_scheduler_kwargs.threshold_mode = get_choice(sub, {"rel", "abs"});
    else if (k == "factor")
      a.lr_scheduler_kwargs.factor = get_number_in(sub, 0, 1, true, true);
    else if (k == "threshold")
      a.lr_scheduler_kwargs.threshold = get_number_in(sub, 0, INFINITY, false, false);
    else if (k == "eps")
      a.lr_scheduler_kwargs.eps = get_number_in(sub, 0, INFINITY, false, false);
    else if (k == "patience")
      a.lr_scheduler_kwargs.patience = get_int(sub, 0);
    else if (k == "cooldown")
      a.lr_scheduler_kwargs.cooldown = get_int(sub, 0);
    else if (k == "warmup_lr_rate")
      a.lr_scheduler_kwargs.warmup_lr_rate = get_number_in(sub, 0, 1, false, false);
    else if (k == "lr_end")
      a.lr_scheduler_kwargs.lr_end = get_number_in(sub, 0, INFINITY, false, false);
    else if (k == "power")
      a.lr_scheduler_kwargs.power = get_number_in(sub, 0, INFINITY, true, false);
    else if (k == "timescale")  // transformers' get_scheduler calls inverse_sqrt without the kwargs
      not_implemented(f, "entry 'timescale' (transformers' Trainer does not pass lr_scheduler_kwargs to "
                         "inverse_sqrt: its time scale is the warm-up steps, or 10000 without warm-up)");
    else if (k == "min_lr_ratio")
      a.lr_scheduler_kwargs.min_lr_ratio = get_number_in(sub, 0, 1, false, false);
    else
      not_implemented(f, "entry '" + k + "'");
  }
}

using Setter = void (*)(TrainArgs&, const Field&);

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> m = {
      {"model_name_or_path",
       [](TrainArgs& a, const Field& f) { a.model_name_or_path = get_string(f); }},
      {"disable_gradient_checkpointing",
       [](TrainArgs& a, const Field& f) { a.disable_gradient_checkpointing = get_bool(f); }},
      {"train_from_scratch",
       [](TrainArgs& a, const Field& f) { a.train_from_scratch = get_bool(f); }},
      {"template", [](TrainArgs& a, const Field& f) {
         a.template_name = f.node.IsNull() ? "" : get_string(f);
         // Checked here, not when the data is loaded, so `export` and `chat` refuse what `train`
         // refuses and every problem of the file is listed at once.
         if (!a.template_name.empty() && a.template_name != "jinja" &&  // the model's own Jinja
             !data::find_template_def(a.template_name)) {
           std::string known;
           for (const auto& n : data::ChatTemplate::names()) known += (known.empty() ? "" : ", ") + n;
           bad_value(f, "a template name unillm has (" + known + ")");
         }
       }},
      {"dataset", [](TrainArgs& a, const Field& f) { a.dataset = get_list(f); }},
      {"eval_dataset", [](TrainArgs& a, const Field& f) { a.eval_dataset = get_list(f); }},
      {"dataset_dir", [](TrainArgs& a, const Field& f) { a.dataset_dir = get_string(f); }},
      {"cutoff_len", [](TrainArgs& a, const Field& f) { a.cutoff_len = get_int(f, 1); }},
      {"max_samples",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull())
           a.max_samples.reset();
         else
           a.max_samples = get_int(f, 1);
       }},
      {"val_size", [](TrainArgs& a, const Field& f) { a.val_size = get_val_size(f); }},
      {"eval_on_each_dataset", [](TrainArgs& a, const Field& f) { a.eval_on_each_dataset = get_bool(f); }},
      {"packing",
       [](TrainArgs& a, const Field& f) {
         a.packing_given = !f.node.IsNull();
         if (a.packing_given) a.packing = get_bool(f);
       }},
      {"preprocessing_batch_size",
       [](TrainArgs& a, const Field& f) { a.preprocessing_batch_size = get_int(f, 1); }},
      {"mix_strategy",
       [](TrainArgs& a, const Field& f) {
         a.mix_strategy = f.node.IsNull() ? "concat" : get_choice(f, {"concat", "interleave_under", "interleave_over"});
       }},
      {"interleave_probs",
       [](TrainArgs& a, const Field& f) {
         a.interleave_probs.clear();
         for (const std::string& s : get_list(f)) {
           char* end = nullptr;
           const double v = std::strtod(s.c_str(), &end);
           if (end == s.c_str() || *end != '\0') bad_value(f, "comma-separated probabilities (\"0.3, 0.7\")");
           a.interleave_probs.push_back(v);
         }
       }},
      {"streaming",
       [](TrainArgs&, const Field& f) {
         if (get_bool(f)) not_implemented(f, "streaming");
       }},
      {"stage",
       [](TrainArgs& a, const Field& f) {
         a.stage = get_choice(f, {"pt", "sft", "rm", "ppo", "dpo", "kto"});
       }},
      {"pref_loss",
       [](TrainArgs& a, const Field& f) {
         a.pref_loss = get_choice(f, {"sigmoid", "hinge", "ipo", "kto_pair", "orpo", "simpo"});
       }},
      {"pref_beta", [](TrainArgs& a, const Field& f) { a.pref_beta = get_number_in(f, 0, 1e9, true, false); }},
      {"pref_ftx", [](TrainArgs& a, const Field& f) { a.pref_ftx = get_number_in(f, 0, 1e9, false, false); }},
      {"dpo_label_smoothing",
       [](TrainArgs& a, const Field& f) { a.dpo_label_smoothing = get_number_in(f, 0, 0.5, false, false); }},
      {"simpo_gamma", [](TrainArgs& a, const Field& f) { a.simpo_gamma = get_number(f, ""); }},
      {"pref_bco_weight",
       [](TrainArgs& a, const Field& f) { a.pref_bco_weight = get_number_in(f, 0, 1e9, false, false); }},
      {"ld_alpha",
       [](TrainArgs& a, const Field& f) {
         if (!f.node.IsNull()) a.ld_alpha = get_number_in(f, 0, 1, false, false);
       }},
      {"kto_chosen_weight",
       [](TrainArgs& a, const Field& f) { a.kto_chosen_weight = get_number_in(f, 0, 1e9, false, false); }},
      {"kto_rejected_weight",
       [](TrainArgs& a, const Field& f) { a.kto_rejected_weight = get_number_in(f, 0, 1e9, false, false); }},
      {"ref_model", [](TrainArgs& a, const Field& f) { a.ref_model = get_string(f); }},
      {"ref_model_adapters", [](TrainArgs& a, const Field& f) { a.ref_model_adapters = get_list(f); }},
      {"ref_mode",
       [](TrainArgs& a, const Field& f) { a.ref_mode = get_choice(f, {"auto", "model", "precompute"}); }},
      {"finetuning_type",
       [](TrainArgs& a, const Field& f) {
         a.finetuning_type = get_choice(f, {"lora", "oft", "freeze", "full"});
       }},
      // QLoRA (train/finetune.cpp quantises the base; the LoRA-only rule is checked there).
      {"quantization_bit",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull()) return;
         a.quantization_bit = get_int(f, 0);
         if (a.quantization_bit != 4 && a.quantization_bit != 8) bad_value(f, "4 or 8 (bitsandbytes)");
       }},
      {"ref_model_quantization_bit",
       [](TrainArgs& a, const Field& f) {
         a.ref_model_quantization_bit = 0;
         if (f.node.IsNull()) return;
         a.ref_model_quantization_bit = get_int(f, 0);
         if (a.ref_model_quantization_bit != 4 && a.ref_model_quantization_bit != 8)
           bad_value(f, "4 or 8 (bitsandbytes)");
       }},
      {"quantization_type",
       [](TrainArgs& a, const Field& f) { a.quantization_type = get_choice(f, {"nf4", "fp4"}); }},
      {"double_quantization", [](TrainArgs& a, const Field& f) { a.double_quantization = get_bool(f); }},
      {"quantization_method",
       [](TrainArgs&, const Field& f) {
         const std::string m = get_string(f);
         if (m != "bnb" && m != "bitsandbytes")
           not_implemented(f, "quantization_method " + show(f.node) + " (only bnb: bitsandbytes nf4/fp4/int8)");
       }},
      {"quantization_device_map",
       [](TrainArgs& a, const Field& f) {
         if (!is_off(f.node))
           a.warnings.push_back("[config] " + f.where + ": key 'quantization_device_map' is ignored (the quantised "
                                "model stays on `device`)");
       }},
      {"disable_shuffling",
       [](TrainArgs& a, const Field& f) { a.disable_shuffling = get_bool(f); }},
      {"plot_loss", [](TrainArgs& a, const Field& f) { a.plot_loss = get_bool(f); }},
      {"output_dir", [](TrainArgs& a, const Field& f) { a.output_dir = get_string(f); }},
      {"overwrite_output_dir",
       [](TrainArgs& a, const Field& f) { a.overwrite_output_dir = get_bool(f); }},
      {"do_train", [](TrainArgs& a, const Field& f) { a.do_train = get_bool(f); }},
      {"do_eval", [](TrainArgs& a, const Field& f) { a.do_eval = get_bool(f); }},
      {"eval_on_start", [](TrainArgs& a, const Field& f) { a.eval_on_start = get_bool(f); }},
      {"do_predict", [](TrainArgs& a, const Field& f) { a.do_predict = get_bool(f); }},
      {"predict_with_generate", [](TrainArgs& a, const Field& f) { a.predict_with_generate = get_bool(f); }},
      {"save_only_model", [](TrainArgs& a, const Field& f) { a.save_only_model = get_bool(f); }},
      {"tool_format", [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull()) return;
         a.tool_format = get_choice(f, {"default", "glm4", "glm4_moe", "ling", "llama3", "mistral", "qwen",
                                        "qwen3_5", "seed_oss"});
       }},
      {"preserve_thinking", [](TrainArgs& a, const Field& f) { a.preserve_thinking = get_bool(f); }},
      {"default_system", [](TrainArgs& a, const Field& f) {
         if (!f.node.IsNull()) a.generating.default_system = get_string(f);
       }},
      {"enable_thinking", [](TrainArgs& a, const Field& f) {
         if (!f.node.IsNull()) a.generating.enable_thinking = get_bool(f);
       }},
      {"eval_strategy",
       [](TrainArgs& a, const Field& f) {
         a.eval_strategy = get_choice(f, {"no", "steps", "epoch"});
       }},
      {"per_device_train_batch_size",
       [](TrainArgs& a, const Field& f) { a.per_device_train_batch_size = get_int(f, 1); }},
      {"auto_find_batch_size", [](TrainArgs& a, const Field& f) { a.auto_find_batch_size = get_bool(f); }},
      {"enable_jit_checkpoint", [](TrainArgs& a, const Field& f) { a.enable_jit_checkpoint = get_bool(f); }},
      {"per_device_eval_batch_size",
       [](TrainArgs& a, const Field& f) { a.per_device_eval_batch_size = get_int(f, 1); }},
      {"per_gpu_train_batch_size",
       [](TrainArgs& a, const Field& f) {
         a.per_gpu_train_batch_size.reset();
         if (!f.node.IsNull() && get_int(f, 0) > 0) a.per_gpu_train_batch_size = get_int(f, 0);
       }},
      {"per_gpu_eval_batch_size",
       [](TrainArgs& a, const Field& f) {
         a.per_gpu_eval_batch_size.reset();
         if (!f.node.IsNull() && get_int(f, 0) > 0) a.per_gpu_eval_batch_size = get_int(f, 0);
       }},
      {"eval_delay", [](TrainArgs& a, const Field& f) { a.eval_delay = f.node.IsNull() ? 0 : get_number_in(f, 0, INFINITY, false, true); }},
      {"data_seed",
       [](TrainArgs& a, const Field& f) {
         a.data_seed.reset();
         if (!f.node.IsNull()) a.data_seed = get_int(f, 0);
       }},
      {"ignore_data_skip", [](TrainArgs& a, const Field& f) { a.ignore_data_skip = get_bool(f); }},
      {"group_by_length", [](TrainArgs& a, const Field& f) { a.group_by_length = get_bool(f); }},
      {"early_stopping_steps",
       [](TrainArgs& a, const Field& f) {
         a.early_stopping_steps.reset();
         if (!f.node.IsNull()) a.early_stopping_steps = get_int(f, 1);
       }},
      {"restore_callback_states_from_checkpoint",
       [](TrainArgs& a, const Field& f) { a.restore_callback_states_from_checkpoint = get_bool(f); }},
      {"rope_scaling",
       [](TrainArgs& a, const Field& f) {
         a.rope_scaling.clear();
         if (f.node.IsNull()) return;
         a.rope_scaling = get_choice(f, {"linear", "dynamic", "yarn", "llama3"});
       }},
      {"label_smoothing_factor",
       [](TrainArgs& a, const Field& f) {
         a.label_smoothing_factor = f.node.IsNull() ? 0 : get_number_in(f, 0, 1, false, true);
       }},
      {"moe_aux_loss_coef",
       [](TrainArgs& a, const Field& f) {
         a.moe_aux_loss_coef = f.node.IsNull() ? 0 : get_number_in(f, 0, INFINITY, false, true);
       }},
      {"neftune_noise_alpha",
       [](TrainArgs& a, const Field& f) {
         a.neftune_noise_alpha = f.node.IsNull() ? 0 : get_number_in(f, 0, INFINITY, false, true);
       }},
      {"gradient_accumulation_steps",
       [](TrainArgs& a, const Field& f) { a.gradient_accumulation_steps = get_int(f, 1); }},
      {"learning_rate",
       [](TrainArgs& a, const Field& f) {
         a.learning_rate = get_number_in(f, 0, INFINITY, false, false);
       }},
      {"weight_decay",
       [](TrainArgs& a, const Field& f) {
         a.weight_decay = get_number_in(f, 0, INFINITY, false, false);
       }},
      {"adam_beta1",
       [](TrainArgs& a, const Field& f) { a.adam_beta1 = get_number_in(f, 0, 1, false, true); }},
      {"adam_beta2",
       [](TrainArgs& a, const Field& f) { a.adam_beta2 = get_number_in(f, 0, 1, false, true); }},
      {"adam_epsilon",
       [](TrainArgs& a, const Field& f) {
         a.adam_epsilon = get_number_in(f, 0, INFINITY, true, false);
       }},
      {"max_grad_norm",
       [](TrainArgs& a, const Field& f) {
         a.max_grad_norm = get_number_in(f, 0, INFINITY, false, false);
       }},
      {"num_train_epochs",
       [](TrainArgs& a, const Field& f) {
         a.num_train_epochs = get_number_in(f, 0, INFINITY, true, false);
       }},
      {"max_steps", [](TrainArgs& a, const Field& f) { a.max_steps = get_int(f, -1); }},
      {"lr_scheduler_type",
       [](TrainArgs& a, const Field& f) {  // transformers' SchedulerType (all implemented: lr_schedule.h)
         a.lr_scheduler_type = get_choice(
             f, {"linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                 "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau",
                 "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay"});
       }},
      {"lr_scheduler_kwargs", set_lr_kwargs},
      {"warmup_ratio",
       [](TrainArgs& a, const Field& f) { a.warmup_ratio = get_number_in(f, 0, 1, false, false); }},
      {"warmup_steps",
       [](TrainArgs& a, const Field& f) {
         double v = get_number_in(f, 0, INFINITY, false, false);
         if ((v >= 1 && v != std::floor(v)) || v > kMaxSteps)
           bad_value(f, "a whole number of steps (at most 2^53) or a fraction in [0, 1)");
         a.warmup_steps = v;
       }},
      {"logging_strategy",
       [](TrainArgs& a, const Field& f) {
         a.logging_strategy = get_choice(f, {"no", "steps", "epoch"});
       }},
      {"save_strategy",
       [](TrainArgs& a, const Field& f) {
         a.save_strategy = get_choice(f, {"no", "steps", "epoch", "best"});
       }},
      {"logging_steps", [](TrainArgs& a, const Field& f) { a.logging_steps = get_steps(f); }},
      {"save_steps", [](TrainArgs& a, const Field& f) { a.save_steps = get_steps(f); }},
      {"eval_steps",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull())
           a.eval_steps.reset();
         else
           a.eval_steps = get_steps(f);
       }},
      {"save_total_limit",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull())
           a.save_total_limit.reset();
         else
           a.save_total_limit = get_int(f, 1);
       }},
      {"load_best_model_at_end",
       [](TrainArgs& a, const Field& f) { a.load_best_model_at_end = get_bool(f); }},
      {"metric_for_best_model",
       [](TrainArgs& a, const Field& f) {
         a.metric_for_best_model.clear();
         if (f.node.IsNull()) return;
         std::string m = get_string(f);
         if (m.rfind("eval_", 0) == 0) m = m.substr(5);  // HF accepts both spellings
         Field bare{f.key, YAML::Node(m), f.where};
         // The stage's own metrics, and eval_on_each_dataset's <name>_<metric>, are checked with
         // the stage and the datasets (args_checks.cpp).
         a.metric_for_best_model = m.find('/') != std::string::npos || m.find('_') != std::string::npos || m == "kl"
                                       ? m
                                       : get_choice(bare, {"loss", "perplexity", "accuracy"});
       }},
      {"greater_is_better",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull())
           a.greater_is_better.reset();
         else
           a.greater_is_better = get_bool(f);
       }},
      {"seed", [](TrainArgs& a, const Field& f) { a.seed = get_int(f, 0); }},
      {"resume_from_checkpoint",
       [](TrainArgs& a, const Field& f) {
         bool b;
         a.resume_from_checkpoint = {};
         if (f.node.IsNull()) return;
         if (f.node.IsScalar() && YAML::convert<bool>::decode(f.node, b)) {
           if (b) a.resume_from_checkpoint.kind = ResumeFrom::Kind::kLatest;
           return;
         }
         a.resume_from_checkpoint = {ResumeFrom::Kind::kPath, get_string(f)};
       }},
      {"bf16", [](TrainArgs& a, const Field& f) { a.bf16 = get_bool(f); }},
      {"bf16_compute", [](TrainArgs& a, const Field& f) { a.bf16_compute = get_bool(f); }},
      {"fp16", [](TrainArgs& a, const Field& f) { a.fp16 = get_bool(f); }},
      {"optim",
       [](TrainArgs& a, const Field& f) {
         a.optim = get_string(f);
         if (optimizer_kind(a.optim).empty())
           not_implemented(f, "'" + a.optim + "' (implemented: " + implemented_optimizers() + ")");
       }},
      {"adafactor", [](TrainArgs& a, const Field& f) { a.adafactor = get_bool(f); }},
      {"optim_target_modules",
       [](TrainArgs& a, const Field& f) {  // a string is one regex, a list names (HF's rule)
         a.optim_target_modules_is_string = f.node.IsScalar();
         a.optim_target_modules.clear();
         if (f.node.IsNull()) return;
         if (f.node.IsScalar()) {
           a.optim_target_modules.push_back(f.node.Scalar());
           return;
         }
         if (!f.node.IsSequence()) bad_value(f, "a module name regex or a list of module names");
         for (const auto& e : f.node) {
           if (!e.IsScalar()) bad_value(f, "a list of module names");
           a.optim_target_modules.push_back(e.Scalar());
         }
       }},
      {"optim_args", [](TrainArgs& a, const Field& f) { a.optim_args = f.node.IsNull() ? "" : get_string(f); }},
      {"loraplus_lr_ratio",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull())
           a.loraplus_lr_ratio.reset();
         else
           a.loraplus_lr_ratio = get_number_in(f, 0, INFINITY, true, false);
       }},
      {"loraplus_lr_embedding",
       [](TrainArgs& a, const Field& f) { a.loraplus_lr_embedding = get_number_in(f, 0, INFINITY, false, false); }},
      {"dataloader_drop_last",
       [](TrainArgs&, const Field& f) {
         if (get_bool(f)) not_implemented(f, "true");
       }},
      {"skip_bad_records", [](TrainArgs& a, const Field& f) { a.skip_bad_records = get_bool(f); }},
  };
  return m;
}

}  // namespace

void bad_value(const Field& f, const std::string& expected) {
  UNILLM_THROW(ConfigError, "[config] ", f.where, ": key '", f.key, "': expected ", expected,
               ", got ", show(f.node));
}

bool is_off(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return true;
  if (n.IsSequence() || n.IsMap()) return n.size() == 0;
  const std::string& s = n.Scalar();
  bool b;
  if (YAML::convert<bool>::decode(n, b)) return !b;
  double d;
  if (YAML::convert<double>::decode(n, d)) return d == 0.0;
  return s.empty() || s == "none" || s == "None";
}

bool set_field(TrainArgs& a, const Field& f) {
  const auto& m = setters();
  auto it = m.find(f.key == "evaluation_strategy" ? "eval_strategy" : f.key);
  if (it == m.end()) return set_finetune_field(a, f);
  it->second(a, f);
  return true;
}

}  // namespace unillm::train::detail
