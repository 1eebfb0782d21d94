// The training run's data (see trainer_run.h): the stage's train and eval rows, the batch
// loader over them (v1's dynamic batching included) and eval_on_each_dataset's per-name splits.
#include <filesystem>

#include "data/corpus_data.h"
#include "data/dataset_info.h"
#include "data/error.h"
#include "models/model_config.h"
#include "train/tokenized_path.h"
#include "train/trainer_run.h"

namespace unillm::train::detail {

void Run::setup_data() {
  stage_ = make_stage(a_);
  StageData d = stage_data(*stage_, a_, *tok_, tokenizer_dir_, [this](const std::string& s) { say(s); });
  if (a_.eval_on_each_dataset && !a_.eval_dataset.empty()) compose_eval_splits(d);
  train_ = std::move(d.train);
  eval_ = std::move(d.eval);
  say("data: " + d.description);
  loader_opts_.mask_label_id = d.mask_label_id;
  loader_opts_.pad_id = d.pad_id;
  if (train_.skipped_records > 0) say("skipped " + std::to_string(train_.skipped_records) + " bad records");
  for (const auto& m : train_.skip_messages) say("  " + m);
  loader_opts_.shuffle = !a_.disable_shuffling;
  loader_opts_.seed = static_cast<uint64_t>(a_.data_seed.value_or(a_.seed));
  if (a_.shift_attn) {  // LLaMA-Factory's SFT, pairwise and KTO collators pad to 8 "for shift short attention"
    loader_opts_.pad_to_multiple_of = a_.stage == "pt" ? 4 : kShiftAttnMultiple;
    const bool reference = a_.stage == "dpo" || a_.stage == "kto";
    say("shift_attn: S²-Attn (LongLoRA) in the training forwards — groups of 1/4 of each batch's length, half "
        "the heads shifted by half a group; batches padded to a multiple of " +
        std::to_string(loader_opts_.pad_to_multiple_of) + "; evaluation attends fully" +
        (reference ? std::string("; the reference attends as the policy when it is the policy with its adapters off, "
                                 "fully when it is a frozen copy (LLaMA-Factory's rule)")
                   : std::string()) +
        (a_.stage == "kto" ? "; KTO's target and KL rows are padded apart" : ""));
  }
  // LLaMA-Factory's SFT collator pads every training batch to a multiple of 8; only a
  // mixture-of-depths model can tell (its routed layers keep a share of the padded length and
  // padding takes part in their top-k), so its sft batches are padded as LLaMA-Factory pads them.
  auto routed = [this] {  // (a config.json that does not read is reported when the model loads)
    const std::string cfg = (std::filesystem::path(model_dir_) / "config.json").string();
    try {
      return std::filesystem::exists(cfg) && models::load_model_config(cfg).mixture_of_depths;
    } catch (const std::exception&) {
      return false;
    }
  };
  if (a_.stage == "sft" && !a_.shift_attn && a_.do_train && (!a_.mixture_of_depths.empty() || routed())) {
    loader_opts_.pad_to_multiple_of = 8;
    say("mixture_of_depths: sft batches padded to a multiple of 8 (LLaMA-Factory's SFT collator)");
  }
  rebuild_loader();
  if (loss_predict()) test_ = data::load_corpus_test_rows(data_options(a_), *tok_);
  if (loss_predict() && test_.num_rows() == 0)
    UNILLM_THROW(data::DataError, "[data] do_predict: the test part of split ", a_.split,
                 " of input_dir '", a_.input_dir, "' holds no row (", test_.documents,
                 " documents; cutoff_len ", a_.data_cutoff_len(), ")");
  // Pairwise data: rows come in chosen/rejected pairs, which the batch size counts.
  auto pairs = [](const data::TokenizedDataset& d) {
    return d.group == 2 ? " (" + std::to_string(d.num_examples()) + " pairs)" : std::string();
  };
  say("data: " + std::to_string(train_.num_rows()) + " train rows" + pairs(train_) + " (" +
      std::to_string(train_.num_tokens()) + " tokens), " + std::to_string(eval_.num_rows()) +
      " eval rows" + pairs(eval_) + (loss_predict() ? ", " + std::to_string(test_.num_rows()) + " test rows" : ""));
}

void Run::rebuild_loader() {
  loader_opts_.batch_size = a_.per_device_train_batch_size;
  if (a_.group_by_length)  // HF sorts within megabatches of whole optimizer steps
    loader_opts_.length_group = a_.per_device_train_batch_size * a_.gradient_accumulation_steps * dp_size();
  if (!a_.v1_batching.empty()) {  // LLaMA-Factory v1's dynamic batching: cutoff_len × micro_batch_size tokens
    const bool pairs = train_.group != 1;
    loader_opts_.budget_by_sum = a_.v1_batching == "dynamic_padding_free";
    // v1 packs whole chosen|rejected samples end to end, and its dpo trainer then sums every
    // chosen (and every rejected) token of the packed row into one log-prob: no pair loss.
    if (pairs && loader_opts_.budget_by_sum)
      UNILLM_THROW(NotImplemented, "[train] ", a_.config_path, ": batching_strategy dynamic_padding_free with stage ",
                   a_.stage, ": v1 packs several chosen/rejected pairs into one row, where its dpo trainer adds the "
                   "pairs' log-probs together; use dynamic_batching (pairs padded within the same token budget)");
    loader_opts_.token_budget = a_.cutoff_len * a_.per_device_train_batch_size;
    say("batches: " + a_.v1_batching + ", each micro-batch the next " + (pairs ? "pairs" : "rows") + " while their " +
        (loader_opts_.budget_by_sum ? "tokens"
         : pairs                    ? "padded tokens (pairs × longest chosen+rejected)"
                                    : "padded tokens (rows × longest)") +
        " stay within " + std::to_string(loader_opts_.token_budget) + " (cutoff_len × micro_batch_size)");
  }
  loader_ = std::make_unique<data::BatchLoader>(train_, loader_opts_);
}

// LLaMA-Factory's eval_on_each_dataset: each name read and preprocessed (packed) on its own, as
// its dict of evaluation sets is; the rows go into one eval_ and each name keeps its range.
void Run::compose_eval_splits(StageData& d) {
  // Each name is read again on its own below, from a fresh generator: num_samples would draw
  // other rows than LLaMA-Factory's one pass over the train and eval datasets.
  for (const data::DatasetAttr& attr : data::resolve_datasets(a_.eval_dataset, a_.dataset_dir, a_.stage))
    if (attr.num_samples)
      UNILLM_THROW(ConfigError, "[data] eval_on_each_dataset with num_samples on an eval dataset ('", attr.name,
                   "') is not implemented yet");
  data::TokenizedDataset eval;
  for (const std::string& name : a_.eval_dataset) {
    TrainArgs one = a_;  // only this dataset is read (its train rows are dropped)
    one.dataset = {name};
    one.eval_dataset = {name};
    one.interleave_probs.clear();
    one.mix_strategy = "concat";
    StageData part = make_stage(one)->load_data(*tok_, tokenizer_dir_);
    const int64_t first = eval.num_examples();
    data::append_examples(eval, part.eval);
    eval_splits_.push_back({name, first, eval.num_examples()});
    say("eval_on_each_dataset: '" + name + "' " + std::to_string(eval.num_examples() - first) + " examples");
  }
  d.eval = std::move(eval);
  stage_->adopt_data(d);  // what the stage keeps per row counts the composed rows
}

}  // namespace unillm::train::detail
