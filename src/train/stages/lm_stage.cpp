// Stages pt and sft: the token cross-entropy of a causal LM. A step's loss is token-weighted over
// all its micro-batches (HF's num_items_in_batch): each micro-batch's summed loss is weighted by
// 1 / the step's scored tokens.
#include <cmath>

#include "autograd/engine.h"
#include "data/sft.h"
#include "train/stages/stage.h"

namespace unillm::train {
namespace {

class LmStage : public Stage {
 public:
  explicit LmStage(const TrainArgs& a) : a_(a) {}
  std::string name() const override { return a_.stage; }

  StageData load_data(const io::Tokenizer& tok, const std::string& tokenizer_dir) override {
    StageData d;
    if (a_.stage == "sft") {
      const bool paddle = !a_.dataset_name_or_path.empty();
      // PaddleNLP renders through the model's chat template when it has one, else src + tgt + EOS.
      if (!paddle || !a_.template_name.empty() || data::has_chat_template(tokenizer_dir)) {
        auto choice = data::choose_template(a_.template_name, tokenizer_dir);
        template_ = data::make_chat_template(choice, tok, template_options(a_, choice.options));
      }
      data::SftOptions so = sft_options(a_);
      d.pad_id = so.pad_id = pad_id_of(tok, template_ ? template_->eos_id() : tok.eos_id());
      std::tie(d.train, d.eval) = data::load_sft_data(so, tok, template_.get());
      d.description = std::string(paddle ? "{src,tgt} " : "") + "sft, template '" +
                      (template_ ? template_->name() : "none (src + tgt + EOS)") + "'";
    } else {
      std::tie(d.train, d.eval) = data::load_pretrain_data(data_options(a_), tok);
      d.pad_id = tok.token_to_id("<pad>").value_or(-1);
      if (d.pad_id < 0) d.pad_id = data::pretrain_eos_id(data_options(a_), tok);  // LLaMA-Factory: pad = eos
      // HF's DataCollatorForLanguageModeling (stage pt) masks every label equal to the pad id.
      d.mask_label_id = d.pad_id;
      d.description = "pt";
    }
    return d;
  }

  double micro_weight(const std::vector<data::Batch>& group) const override {
    int64_t items = 0;
    for (const auto& b : group) items += scored_labels(b);
    return items > 0 ? 1.0 / static_cast<double>(items) : 0.0;
  }

  MicroResult train_micro(models::CausalLM& model, const data::Batch& b, const MicroOptions& o) override {
    const auto seed = static_cast<float>(o.seed);
    models::TrainBatch tb = to_train_batch(b);
    tb.dropout_rng = o.rng;  // LoRA dropout
    // The exact d(loss_sum) backward receives, so the loss computes its gradients eagerly.
    auto out = model.loss(tb, o.recompute, static_cast<double>(seed));
    MicroResult r;
    r.loss = out.loss_sum.item_flat(0);
    if (seed != 0 && std::isfinite(r.loss)) autograd::backward(out.loss_sum, Tensor::from_vector({seed}, {}));
    return r;
  }

  EvalPart eval_batch(models::CausalLM& model, const data::Batch& b) override {
    auto out = model.loss(to_train_batch(b), false);
    return {out.loss_sum.item_flat(0), out.count, {}};
  }

  bool token_loss() const override { return true; }
  std::vector<std::string> plot_keys() const override { return {"loss", "eval_loss"}; }

 private:
  const TrainArgs& a_;
  std::unique_ptr<data::ChatTemplate> template_;
};

}  // namespace

std::unique_ptr<Stage> make_lm_stage(const TrainArgs& args) { return std::make_unique<LmStage>(args); }

}  // namespace unillm::train
