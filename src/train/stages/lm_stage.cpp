// Stages pt and sft: the token cross-entropy of a causal LM. A step's loss is token-weighted over
// all its micro-batches (HF's num_items_in_batch): each micro-batch's summed loss is weighted by
// 1 / the step's scored tokens. SFT's loss variants (use_dft_loss, use_eaft_loss) weight each
// token's cross-entropy (ops/weighted_cross_entropy.h) under the same normalisation, as
// LLaMA-Factory's dft/eaft_loss_func divide by num_items_in_batch; use_asft_loss adds the KL to
// a frozen reference (ops/asft_cross_entropy.h, stages/reference.h), normalised as below.
// Mixture-of-experts models trained with their router load-balancing loss add coef · aux per
// micro-batch (ops/moe_balance.h), summed over the step's micro-batches on every process: HF's
// Trainer does not divide the loss of a model that takes its loss kwargs (Qwen2/3-MoE) by
// gradient_accumulation_steps, and with average_tokens_across_devices (transformers' default
// from 4.54) multiplies it by the process count before DDP averages.
// micro_batch_mean_loss (Megatron Core's calculate_per_token_loss: false) instead takes each
// micro-batch's mean over its scored tokens and averages those over the step's micro-batches of
// every process, as Megatron's schedule divides each by num_microbatches and DDP by dp.
// use_asft_loss takes each micro-batch's mean too and sums them over a process's accumulation
// (LLaMA-Factory's asft_loss_func returns a micro-batch mean, and HF's Trainer divides neither a
// compute_loss_func's loss by gradient_accumulation_steps nor, since transformers 4.49, DeepSpeed's),
// DDP averaging over the dp processes: weight 1/dp.
#include <algorithm>
#include <cmath>
#include <optional>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "data/sft.h"
#include "data/v1_data.h"
#include "ops/asft_cross_entropy.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/label_smoothing.h"
#include "ops/weighted_cross_entropy.h"
#include "train/stages/reference.h"
#include "train/stages/stage.h"

namespace unillm::train {
namespace {

class LmStage : public Stage {
 public:
  explicit LmStage(const TrainArgs& a) : a_(a) {
    if (a.use_dft_loss || a.use_eaft_loss) {
      weighting_.emplace();
      if (a.use_eaft_loss) weighting_->kind = ops::TokenWeighting::Kind::kEaft;
      weighting_->alpha = a.eaft_alpha;
    }
    // ASFT's reference as the preference stages hold it, never precomputed (it needs logits).
    ref_kind_ = a.adapter_tuning() && a.ref_model.empty() ? RefKind::adapters_off : RefKind::copy;
  }

  std::string plan_memory(MemoryPlanInputs& in, int64_t) override {
    if (a_.use_asft_loss && ref_kind_ == RefKind::copy) {
      in.reference_weights = in.params.base;  // the copy has the policy's shape
      in.reference_weight_bytes = in.frozen_weight_bytes;
    }
    in.asft_reference_logits = a_.use_asft_loss;
    return "";
  }

  void prepare(models::CausalLM& model, const PrepareContext& ctx) override {
    dp_ = std::max<int64_t>(ctx.dp_size, 1);
    if (a_.use_asft_loss) ref_ = make_reference(ref_kind_, a_, model, ctx);
  }
  std::string name() const override { return a_.stage; }

  StageData load_data(const io::Tokenizer& tok, const std::string& tokenizer_dir) override {
    StageData d;
    if (a_.stage == "sft" && !a_.v1_train_dataset.empty()) {  // a LLaMA-Factory v1 config
      data::V1DataOptions vo;
      vo.train_dataset = a_.v1_train_dataset;
      vo.where = a_.config_path + " (train_dataset)";
      vo.cutoff_len = a_.cutoff_len;
      vo.seed = a_.seed;
      d.train = data::load_v1_sft_data(vo, tok, tokenizer_dir);
      d.pad_id = pad_id_of(tok, tok.eos_id());
      d.description = "LLaMA-Factory v1 sft (one sample per supervised turn), the model's own chat template";
    } else if (a_.stage == "sft") {
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
    if (a_.micro_batch_mean_loss) return group.empty() ? 0.0 : 1.0 / static_cast<double>(group.size());
    if (a_.use_asft_loss) return 1.0 / static_cast<double>(dp_);
    int64_t items = 0;
    for (const auto& b : group) items += scored_labels(b);
    return items > 0 ? 1.0 / static_cast<double>(items) : 0.0;
  }

  MicroResult train_micro(models::CausalLM& model, const data::Batch& b, const MicroOptions& o) override {
    const double scale = micro_scale(b);
    const auto seed = static_cast<float>(o.seed * scale);
    models::TrainBatch tb = to_train_batch(b);
    tb.dropout_rng = o.rng;  // LoRA dropout
    set_neftune(tb, a_.neftune_noise_alpha, o.rng);
    set_shift_attn(tb, a_.shift_attn);
    const double coef = router_aux_loss_coef(model);
    if (coef > 0) tb.moe_balance = models::moe_balance_for(tb, model.config(), coef * o.aux_seed);
    // The exact d(loss_sum) backward receives, so the loss computes its gradients eagerly.
    auto out = loss(model, tb, o.recompute, static_cast<double>(seed));
    MicroResult r;
    r.loss = scale * out.loss_sum.item_flat(0);
    if ((seed != 0 || coef > 0 || o.backward_always) && std::isfinite(r.loss))
      autograd::backward(out.loss_sum, Tensor::from_vector({seed}, {}));
    if (coef > 0) r.aux_loss = coef * tb.moe_balance->loss();
    return r;
  }

  // With the router load-balancing loss, each batch's loss per token is its token loss plus
  // coef · aux, as HF's per-batch loss (CE mean + coef · aux).
  EvalPart eval_batch(models::CausalLM& model, const data::Batch& b, bool) override {
    models::TrainBatch tb = to_train_batch(b);
    const double coef = router_aux_loss_coef(model);
    if (coef > 0) tb.moe_balance = models::moe_balance_for(tb, model.config(), 0);
    auto out = loss(model, tb, false, 0);
    double sum = out.loss_sum.item_flat(0);
    if (coef > 0) sum += coef * tb.moe_balance->loss() * static_cast<double>(out.count);
    return {sum, out.count, {}, {}};
  }

  // The plain token loss (eval_batch's model.loss) from a pipeline's final hidden states; a loss
  // variant or the load-balancing loss (whose sums travel beside the activations) needs more.
  bool evaluates_from_hidden(const models::CausalLM& model) const override {
    return model_token_loss() && router_aux_loss_coef(model) <= 0;
  }
  EvalPart eval_from_hidden(models::CausalLM& model, const Tensor& x, const models::TrainBatch& tb) override {
    const models::LossResult out = loss_from_hidden(model, x, tb, 0, Tensor());
    return {out.loss_sum.item_flat(0), out.count, {}, {}};
  }

  // Pipeline parallelism: NEFTune and S²-Attn as train_micro sets them; ASFT's reference hidden
  // states come from a forward-only pass through the stages before the step's pipeline.
  models::TrainBatch pipeline_batch(models::CausalLM& model, const data::Batch& b, const Rng& micro,
                                    const MicroOptions& o) const override {
    models::TrainBatch tb = to_train_batch(b);
    set_neftune(tb, a_.neftune_noise_alpha, &micro);
    set_shift_attn(tb, a_.shift_attn);
    // The load-balancing loss: the pipeline gives each stage a balance of this one's kind and
    // passes the recorded totals along (ops::MoeBalance::totals).
    const double coef = router_aux_loss_coef(model);
    if (coef > 0) tb.moe_balance = models::moe_balance_for(tb, model.config(), coef * o.aux_seed);
    return tb;
  }
  void pipeline_prepare(models::CausalLM& model, const std::vector<const data::Batch*>&,
                        const std::vector<models::TrainBatch>& policy, const PipelinePass& pass) override {
    ref_hidden_.clear();
    if (!a_.use_asft_loss) return;
    if (!ref_) ref_ = Reference::adapters_off();  // a stage used without prepare (tests)
    std::vector<models::TrainBatch> batches;
    for (const models::TrainBatch& tb : policy) batches.push_back(reference_batch(tb));  // as train_micro's
    ref_hidden_.resize(policy.size());
    pass(ref_->model() ? *ref_->model() : model, batches, [&](int i, const Tensor& x) { ref_hidden_[i] = x; });
  }
  PipelineHead pipeline_head(models::CausalLM& model, const Tensor& x, int micro, const data::Batch& b,
                             const models::TrainBatch& tb, const MicroOptions& o) override {
    const Tensor x_ref = a_.use_asft_loss ? ref_hidden_.at(static_cast<size_t>(micro)) : Tensor();
    const double scale = micro_scale(b);
    const models::LossResult out = loss_from_hidden(model, x, tb, o.seed * scale, x_ref);
    PipelineHead h;
    h.root = out.loss_sum;
    h.grad = {static_cast<float>(scale)};
    h.result.loss = scale * out.loss_sum.item_flat(0);
    // tb's balance holds the totals of every stage's sparse layers here, on the last stage.
    if (const double coef = router_aux_loss_coef(model); coef > 0 && tb.moe_balance)
      h.result.aux_loss = coef * tb.moe_balance->loss();
    return h;
  }

  bool token_loss() const override { return true; }
  bool model_token_loss() const override { return !a_.use_asft_loss && !weighting_ && a_.label_smoothing_factor <= 0; }
  std::vector<std::string> plot_keys() const override { return {"loss", "eval_loss"}; }

 private:
  // HF's router_aux_loss_coef when a mixture-of-experts model is trained with its router
  // load-balancing loss (config.json's output_router_logits, or moe_aux_loss_coef); else 0.
  static double router_aux_loss_coef(const models::CausalLM& model) { return model.config().router_aux_loss(); }

  // What a micro-batch's summed loss is multiplied by before the step's weight: 1, or under
  // micro_batch_mean_loss and ASFT 1 / its scored tokens (its mean; 0 when it has none).
  double micro_scale(const data::Batch& b) const {
    if (!a_.micro_batch_mean_loss && !a_.use_asft_loss) return 1.0;
    const int64_t n = scored_labels(b);
    return n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
  }

  // The summed (weighted, for a loss variant) token loss of one batch. The plain token loss is
  // model.loss()'s (which splits the lm_head or the rows under tensor parallelism).
  models::LossResult loss(models::CausalLM& model, const models::TrainBatch& tb, bool recompute, double hint) {
    if (model_token_loss()) return model.loss(tb, recompute, hint);
    const Tensor x_ref = a_.use_asft_loss ? reference_hidden(model, tb) : Tensor();  // before the policy's forward
    const Tensor x = model.hidden_states(tb, recompute);  // [N, C]
    return loss_from_hidden(model, x, tb, hint, x_ref);
  }

  // The loss of a batch from the policy's final hidden states x (a pipeline's last stage has only
  // these): ASFT's against the reference's x_ref, label smoothing's, the token weighting's, or the
  // plain one computing its gradients eagerly (hint: the seed backward will bring).
  models::LossResult loss_from_hidden(models::CausalLM& model, const Tensor& x, const models::TrainBatch& tb,
                                      double hint, const Tensor& x_ref) {
    if (a_.use_asft_loss) {
      const models::CausalLM& ref_model = ref_->model() ? *ref_->model() : model;
      auto r = ops::asft_cross_entropy(x, model.lm_head_weight(), x_ref, ref_model.lm_head_weight(),
                                       models::shifted_labels(tb.labels), {a_.asft_alpha, hint != 0 ? hint : 1.0, 0});
      return {r.loss_sum, r.count};
    }
    if (a_.label_smoothing_factor > 0) return smoothed(model, x, tb);
    if (weighting_) {
      auto r = ops::weighted_cross_entropy(x, model.lm_head_weight(), models::shifted_labels(tb.labels), *weighting_);
      return {r.loss_sum, r.count};
    }
    auto ce = ops::linear_cross_entropy_eager_grad(x, model.lm_head_weight(), model.loss_labels(tb), hint);
    return {ce.loss_sum, ce.count};
  }

  // HF's LabelSmoother (label_smoothing_factor ε): the token cross-entropy plus
  // ops::label_smoothing_term, in training and evaluation alike (HF's prediction_step computes its
  // eval loss with compute_loss, which smooths too).
  models::LossResult smoothed(models::CausalLM& model, const Tensor& x, const models::TrainBatch& tb) {
    const Tensor labels = models::shifted_labels(tb.labels);
    auto ce = ops::linear_cross_entropy(x, model.lm_head_weight(), labels);
    return {ops::add(ce.loss_sum, ops::label_smoothing_term(x, model.lm_head_weight(), labels, a_.label_smoothing_factor)),
            ce.count};
  }

  // ASFT: the reference's hidden states of a policy batch (no gradient, no dropout).
  Tensor reference_hidden(models::CausalLM& model, const models::TrainBatch& tb) {
    if (!ref_) ref_ = Reference::adapters_off();  // a stage used without prepare (tests)
    models::CausalLM& ref_model = ref_->model() ? *ref_->model() : model;
    autograd::NoGradGuard no_grad;
    return ref_model.hidden_states(reference_batch(tb), false);  // [N, C]
  }

  // The reference's view of a policy batch: no dropout, no routing record, and the policy's
  // adapters off when the policy is the reference.
  models::TrainBatch reference_batch(models::TrainBatch rb) const {
    rb.dropout_rng = nullptr;
    rb.moe_balance = nullptr;  // the policy's routing only
    if (!ref_->model()) rb.adapters = std::vector<std::string>{};  // the policy with its adapters off
    return rb;
  }

  const TrainArgs& a_;
  std::optional<ops::TokenWeighting> weighting_;  // set for use_dft_loss / use_eaft_loss
  RefKind ref_kind_;
  int64_t dp_ = 1;  // data-parallel replicas (prepare)
  std::unique_ptr<Reference> ref_;  // use_asft_loss
  std::vector<Tensor> ref_hidden_;  // use_asft_loss under pipeline parallelism: the step's, by micro-batch
  std::unique_ptr<data::ChatTemplate> template_;
};

}  // namespace

std::unique_ptr<Stage> make_lm_stage(const TrainArgs& args) { return std::make_unique<LmStage>(args); }

}  // namespace unillm::train
