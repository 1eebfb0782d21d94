// Setters and cross-key rules for the fine-tuning keys: SFT data (train_on_prompt,
// mask_history, neat_packing), freeze, LoRA, adapters, export, and PaddleNLP's {src,tgt} data keys.
#include <cmath>
#include <limits>
#include <map>

#include "core/error.h"
#include "data/corpus_data.h"
#include "train/args_internal.h"

namespace unillm::train::detail {

namespace {

using Setter = void (*)(TrainArgs&, const Field&);

std::optional<double> get_optional_number(const Field& f) {
  if (f.node.IsNull()) return std::nullopt;
  return get_number_in(f, 0, INFINITY, true, false);
}

const std::map<std::string, Setter>& finetune_setters() {
  static const std::map<std::string, Setter> m = {
      {"train_on_prompt", [](TrainArgs& a, const Field& f) { a.train_on_prompt = get_bool(f); }},
      {"mask_history", [](TrainArgs& a, const Field& f) { a.mask_history = get_bool(f); }},
      {"neat_packing", [](TrainArgs& a, const Field& f) { a.neat_packing = get_bool(f); }},
      {"freeze_trainable_layers",
       [](TrainArgs& a, const Field& f) {
         a.freeze_trainable_layers = get_int(f, std::numeric_limits<int64_t>::min());
         if (a.freeze_trainable_layers == 0) bad_value(f, "a non-zero integer");
       }},
      {"freeze_trainable_modules",
       [](TrainArgs& a, const Field& f) { a.freeze_trainable_modules = get_list(f); }},
      {"freeze_extra_modules",
       [](TrainArgs& a, const Field& f) { a.freeze_extra_modules = get_list(f); }},
      {"lora_rank", [](TrainArgs& a, const Field& f) { a.lora_rank = get_int(f, 1); }},
      {"lora_alpha", [](TrainArgs& a, const Field& f) { a.lora_alpha = get_optional_number(f); }},
      {"lora_dropout",
       [](TrainArgs& a, const Field& f) { a.lora_dropout = get_number_in(f, 0, 1, false, true); }},
      {"lora_target", [](TrainArgs& a, const Field& f) { a.lora_target = get_list(f); }},
      {"use_rslora", [](TrainArgs& a, const Field& f) { a.use_rslora = get_bool(f); }},
      {"use_dora", [](TrainArgs& a, const Field& f) { a.use_dora = get_bool(f); }},
      {"pissa_init", [](TrainArgs& a, const Field& f) { a.pissa_init = get_bool(f); }},
      {"pissa_iter", [](TrainArgs& a, const Field& f) { a.pissa_iter = get_int(f, -1); }},
      {"pissa_convert", [](TrainArgs& a, const Field& f) { a.pissa_convert = get_bool(f); }},
      {"create_new_adapter",
       [](TrainArgs& a, const Field& f) { a.create_new_adapter = get_bool(f); }},
      {"adapter_name_or_path",
       [](TrainArgs& a, const Field& f) { a.adapter_name_or_path = get_list(f); }},
      {"export_dir", [](TrainArgs& a, const Field& f) { a.export_dir = get_string(f); }},
      {"export_quantization_bit",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull()) return;
         a.export_quantization_bit = get_int(f, 0);
         if (a.export_quantization_bit != 0 && a.export_quantization_bit != 8 && a.export_quantization_bit != 4)
           UNILLM_THROW(NotImplemented, "[config] ", f.where, ": export_quantization_bit ", a.export_quantization_bit,
                        " is not supported (8 or 4: weight-only int8 / int4)");
       }},
      {"export_quantization_dataset",
       [](TrainArgs& a, const Field& f) {
         if (!f.node.IsNull()) a.export_quantization_dataset = get_string(f);
       }},
      {"export_quantization_nsamples",
       [](TrainArgs& a, const Field& f) { a.export_quantization_nsamples = get_int(f, 1); }},
      {"export_quantization_maxlen",
       [](TrainArgs& a, const Field& f) { a.export_quantization_maxlen = get_int(f, 2); }},
      {"export_size",
       [](TrainArgs& a, const Field& f) {
         a.export_size = get_number_in(f, 0, INFINITY, true, false);
       }},
      {"dataset_name_or_path",
       [](TrainArgs& a, const Field& f) { a.dataset_name_or_path = get_string(f); }},
      {"src_length", [](TrainArgs& a, const Field& f) { a.src_length = get_int(f, 1); }},
      {"max_length", [](TrainArgs& a, const Field& f) { a.max_length = get_int(f, 2); }},
      {"zero_padding", [](TrainArgs& a, const Field& f) { a.zero_padding = get_bool(f); }},
      {"input_dir", [](TrainArgs& a, const Field& f) { a.input_dir = get_string(f); }},
      // PaddleNLP-only keys, reached through the PaddleNLP map (args_paddle.cpp), not the table.
      {"tokenizer_name_or_path",
       [](TrainArgs& a, const Field& f) {
         a.tokenizer_name_or_path = f.node.IsNull() ? "" : get_string(f);
       }},
      {"min_learning_rate",
       [](TrainArgs& a, const Field& f) {
         a.min_learning_rate = get_number_in(f, 0, INFINITY, false, false);
       }},
      {"decay_steps",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull())
           a.decay_steps.reset();
         else
           a.decay_steps = get_number_in(f, 0, INFINITY, false, false);
       }},
      {"split",
       [](TrainArgs& a, const Field& f) {
         a.split.clear();
         if (f.node.IsSequence())  // [949, 50, 1] as well as "949,50,1"
           for (const auto& e : f.node)
             a.split += (a.split.empty() ? "" : ",") + get_string({f.key, e, f.where});
         else
           a.split = get_string(f);
         try {
           data::parse_split(a.split);
         } catch (const ConfigError&) {
           bad_value(f, "up to three non-negative weights with a positive sum, such as 949,50,1");
         }
       }},
  };
  return m;
}

// input_dir (a token corpus) is the whole data source of a pretraining run.
void check_input_dir(const TrainArgs& a, const std::string& where) {
  auto refuse = [&](const char* key, const char* why) {
    UNILLM_THROW(ConfigError, "[config] ", where, ": input_dir cannot be used with ", key, " (",
                 why, ")");
  };
  if (!a.dataset.empty()) refuse("dataset", "give one source of training data");
  if (!a.dataset_name_or_path.empty()) refuse("dataset_name_or_path", "that is SFT data");
  if (!a.eval_dataset.empty()) refuse("eval_dataset", "the evaluation set is split's second part");
  if (a.val_size > 1e-6) refuse("val_size", "use split, e.g. 949,50,1");
  if (a.max_samples) refuse("max_samples", "preprocess fewer documents instead");
  if (a.stage != "pt")
    UNILLM_THROW(ConfigError, "[config] ", where,
                 ": input_dir (a pre-tokenised pretraining corpus) needs stage: pt");
}

}  // namespace

bool set_finetune_field(TrainArgs& a, const Field& f) {
  const auto& m = finetune_setters();
  auto it = m.find(f.key);
  if (it == m.end())
    return set_misc_field(a, f) || set_loss_field(a, f) || set_vocab_field(a, f) ||
           set_badam_field(a, f) || set_muon_adam_mini_field(a, f) ||
           set_low_rank_field(a, f) || set_oft_field(a, f) || set_parallel_field(a, f) ||
           set_accelerator_field(a, f) || set_megatron_field(a, f) || set_v1_field(a, f);
  it->second(a, f);
  return true;
}

void finish_finetune_args(TrainArgs& a, const std::string& where, Problems& problems) {
  auto fail = [&](auto&&... parts) { problems.add(UNILLM_MSG("[config] ", where, ": ", parts...), true); };
  if (a.mask_history && a.train_on_prompt)  // LLaMA-Factory's DataArguments
    fail("mask_history is incompatible with train_on_prompt");
  if (a.neat_packing) {  // LLaMA-Factory: neat_packing implies packing
    a.packing = true;
    a.packing_given = true;
  }
  if (!a.lora_alpha) a.lora_alpha = 2.0 * static_cast<double>(a.lora_rank);  // LLaMA-Factory
  finish_misc_args(a, where, problems);
  finish_oft_args(a, where, problems);
  finish_loss_args(a, where, problems);
  finish_badam_args(a, where, problems);
  finish_low_rank_args(a, where, problems);
  finish_muon_adam_mini_args(a, where, problems);
  finish_megatron_args(a, where, problems);
  finish_parallel_args(a, where, problems);
  if (!a.dataset_name_or_path.empty()) {
    if (!a.dataset.empty())
      fail("give either dataset (LLaMA-Factory) or dataset_name_or_path (PaddleNLP), not both");
    if (a.stage != "sft") fail("dataset_name_or_path ({src,tgt} data) needs stage: sft");
    if (a.src_length >= a.max_length)
      fail("src_length (", a.src_length, ") must be less than max_length (", a.max_length, ")");
    if (a.zero_padding) a.neat_packing = a.packing = a.packing_given = true;
  } else if (a.zero_padding) {
    fail("zero_padding applies to PaddleNLP data (dataset_name_or_path); with LLaMA-Factory datasets use neat_packing");
  }
  if (!a.input_dir.empty()) problems.attempt([&] { check_input_dir(a, where); });
  if (!a.adapter_name_or_path.empty() && a.finetuning_type != "lora" && a.finetuning_type != "oft")  // LLaMA-Factory
    fail("adapter_name_or_path is only valid with finetuning_type: lora or oft");
  if (a.pissa_init && a.finetuning_type != "lora")  // LLaMA-Factory's checks
    fail("`pissa_init` is only valid for LoRA training.");
  if (a.pissa_init && a.quantization_bit > 0)
    fail("pissa_init with quantization_bit: Cannot initialize PiSSA adapter on quantized models.");
  if (a.pissa_init && (a.stage == "kto" || (a.stage == "dpo" && a.pref_loss != "orpo" && a.pref_loss != "simpo")))
    fail("pissa_init: Cannot use PiSSA for current training stage (its reference model is the "
         "base, which PiSSA changes).");
  if (a.pissa_convert && !a.pissa_init) fail("pissa_convert needs pissa_init: true");
  if (a.pissa_init && a.use_dora) fail("pissa_init with use_dora is not supported");
}

}  // namespace unillm::train::detail
