// Tensor parallelism in a training run (nn/tensor_parallel.h): the mesh's tp group handed to the
// model as a Collective, and the one correction the gradient sum needs. Every process holds the
// whole model (but for frozen split weights, held as its blocks where nothing else lays the
// parameters out, under context parallelism too: setup_tp_blocks, train/tp_blocks.h; LoRA's base
// is cut as it is read, cut_blocks_on_load); a rank's split layers write only their blocks of the
// weights' gradients (zeros elsewhere), while the parameters every rank of the
// group computes whole — norms, embedding, lm_head, a value head — get the same gradient on
// each. Rank 0 of the group keeps those and the others drop them, so the data-parallel path's
// sum over all processes (allreduce or ZeRO's reduce-scatter) gives one process's gradients, and
// clipping, the optimizers, checkpoints and resume need nothing else.
//
// Expert parallelism (nn/expert_parallel.h) needs no correction at all: its groups are cut from
// the data-parallel processes, and each process's gradients are already the share the sum
// expects (its experts' over the group's tokens, everything else over its own).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "ops/cast.h"
#include "train/finetune.h"
#include "train/trainer_run.h"

namespace unillm::train::detail {

namespace {

// dist's process group as the model's Collective.
class GroupCollective : public nn::Collective {
 public:
  explicit GroupCollective(dist::ProcessGroup& g) : g_(g) {}
  int rank() const override { return g_.rank(); }
  int size() const override { return g_.size(); }
  void allreduce_sum(Tensor& t) override { g_.allreduce(t, dist::ReduceOp::sum); }
  void allgather(const Tensor& in, Tensor& out) override { g_.allgather(in, out); }
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override { g_.reduce_scatter(in, out, dist::ReduceOp::sum); }

 private:
  dist::ProcessGroup& g_;
};

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / 1048576.0);
  return buf;
}

}  // namespace

void Run::make_tp_groups() {
  if (tp_group_) return;  // made already for loading (cut_blocks_on_load)
  // The mesh's tp axis: tensor parallelism's group, or context parallelism's T · cp processes,
  // consecutive runs of T (a context shard's tensor-parallel processes) splitting each attention's
  // heads together with the other runs and the MLPs within the run.
  dist::ProcessGroup& axis = model_mesh_->tp();
  tp_group_ = std::make_unique<GroupCollective>(axis);
  const int64_t t = a_.tensor_degree;
  if (a_.context_degree > 1 && t > 1) {
    mlp_process_group_ = axis.split(static_cast<int>(axis.rank() / t), static_cast<int>(axis.rank() % t));
    mlp_group_ = std::make_unique<GroupCollective>(*mlp_process_group_);
  }
}

void Run::split_model(models::CausalLM& m) {
  if (a_.context_degree > 1)
    m.set_tensor_parallel(tp_group_.get(), /*sequence_parallel=*/true, /*vocab_parallel=*/false,
                          /*attention_only=*/true, mlp_group_.get());
  else
    m.set_tensor_parallel(tp_group_.get(), a_.sequence_parallel);
}

std::string Run::blocks_on_load_fallback(const std::string& from) const {
  if (a_.finetuning_type != "lora" && a_.finetuning_type != "freeze")
    return "only LoRA's base and freeze tuning's frozen layers are known to be frozen before the model is read";
  if (a_.quantization_bit > 0) return "QLoRA quantises the base as it is read";
  if (a_.zero_stage >= 2) return "ZeRO-2 and 3 build their units from the whole weights";
  if (const std::string why = policy_whole_load_reason(from, /*casts_as_read=*/true); !why.empty()) return why;
  if (a_.use_dora) return "DoRA's magnitudes read the whole base weights";
  if (a_.use_llama_pro) return "LLaMA-Pro copies base layers";
  if (!a_.mixture_of_depths.empty()) return "mixture_of_depths";
  if (!a_.additional_target.empty() || !a_.adapter_name_or_path.empty())
    return "modules_to_save (additional_target, or an adapter that names them) train whole weights";
  if (a_.ref_mode == "precompute") return "the reference log-probs are precomputed with the whole model";
  return "";
}

bool Run::cuts_blocks_on_load(const std::string& from) const {
  return a_.do_train && !reloading_best_ && model_mesh_ && (a_.tensor_degree > 1 || a_.context_degree > 1) &&
         tp_blocks_fallback().empty() &&
         blocks_on_load_fallback(from).empty();
}

bool Run::drops_experts_on_load(const std::string& from) const {
  return a_.do_train && !reloading_best_ && a_.expert_degree > 1 && holds_own_experts_only() && h_.dp &&
         blocks_on_load_fallback(from).empty();
}

void Run::cut_on_load(models::LoadOptions& lo, bool blocks, bool experts) {
  if (blocks) make_tp_groups();
  // What each linear becomes as soon as it is read, decided once the model is built and before a
  // weight is read: its block for the group the model splits it over (the model is handed the
  // groups, asked, and returned to one process's forward until setup_tensor_parallel), or nothing
  // (an expert another process of the expert group runs: ExpertShares's rule, the group's rank
  // from the data-parallel rank, as setup_expert_parallel cuts the groups).
  auto cut = std::make_shared<std::map<nn::FusedLinear*, nn::Collective*>>();  // nullptr: held as nothing
  lo.on_built = [this, cut, blocks, experts](models::CausalLM& m) {
    // Freeze tuning's rules are names (models::freeze_decisions): its frozen weights are known
    // before they are read, and only those are cut; LoRA's whole base is frozen.
    std::set<const Tensor*> trains;
    if (a_.finetuning_type == "freeze")
      for (const models::FreezeDecision& d : models::freeze_decisions(m, freeze_config(a_)))
        if (d.trainable) trains.insert(d.ref.tensor);
    if (blocks) {
      try {
        split_model(m);
        for (const models::CausalLM::SplitLinear& s : m.split_linears())
          if (s.group && s.group->size() > 1 && !trains.count(&s.linear->weight())) (*cut)[s.linear] = s.group;
      } catch (const ConfigError&) {
        // said, naming the keys, by setup_tensor_parallel
      }
      m.set_tensor_parallel(nullptr);
    }
    const dist::ProcessGroup& data = model_mesh_ ? model_mesh_->dp() : *h_.dp;
    const int64_t ep = a_.expert_degree, n = m.config().num_experts;
    if (experts && n > 0 && n % ep == 0 && data.size() % ep == 0)  // (else refused by setup_expert_parallel)
      for (const auto& [l, runner] : ExpertShares::runners(m.module(), n, static_cast<int>(ep)))
        if (runner != data.rank() % ep && !trains.count(&l->weight())) (*cut)[l] = nullptr;
  };
  // Built without memory, each tensor given its storage's as it is read (a fused linear's whole),
  // so only the tensors read so far and kept, and the linear being read, ever hold any.
  lo.lazy = true;
  lo.before_copy = [](const Tensor& t) {
    if (!t.storage()->holds_memory()) t.storage()->refill();
  };
  // Freeze tuning under mixed precision reads f32 and casts the frozen matrices after loading
  // (cast_frozen_matrices); a linear cut here is cast first, as its block would be after (LoRA's
  // base is read in that dtype already).
  const DType low = a_.adapter_tuning() ? DType::f32 : low_precision_dtype(a_);
  lo.on_linear_loaded = [cut, low](nn::FusedLinear& l) {
    const auto it = cut->find(&l);
    if (it == cut->end()) return;
    // LoRA's base (prepare_lora) or a frozen layer's (apply_freeze, which decides its bias too).
    for (const nn::ParamRef& p : l.parameters()) {
      p.tensor->set_requires_grad(false);
      if (it->second && low != DType::f32 && p.tensor->ndim() >= 2 && p.tensor->dtype() == DType::f32)
        *p.tensor = ops::cast(*p.tensor, low);
    }
    if (it->second)
      l.hold_block(*it->second);
    else
      l.hold_nothing();
  };
}

void Run::setup_context_parallel() {
  const int64_t cp = a_.context_degree;
  if (!stage_->model_token_loss())
    UNILLM_THROW(NotImplemented, "[train] ", a_.config_path, ": context parallelism (context_parallel_degree ", cp,
                 ") with stage ", a_.stage, a_.stage == "sft" || a_.stage == "pt" ? " and its loss variant" : "",
                 " is not implemented yet: its loss needs every token's hidden state (pt and sft's plain token "
                 "loss runs)");
  const models::ModelConfig& c = model_->config();
  if (c.router_aux_loss() > 0)
    UNILLM_THROW(NotImplemented, "[train] ", a_.config_path, ": context parallelism (context_parallel_degree ", cp,
                 ") with the router load-balancing loss (router_aux_loss_coef ", c.router_aux_loss_coef,
                 ") is not implemented yet: each process routes part of a micro-batch's tokens, and the loss "
                 "couples them all; train without moe_aux_loss_coef / output_router_logits, or without context "
                 "parallelism");
  if (a_.tensor_parallel_output) say("tensor_parallel_output: context parallelism keeps the lm_head whole");
  const int64_t t = a_.tensor_degree;
  make_tp_groups();
  try {
    split_model(*model_);
  } catch (const ConfigError& e) {
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": context_parallel_degree ", cp,
                 t > 1 ? UNILLM_MSG(" × tensor_parallel_degree ", t) : std::string(), ": ", e.what());
  }
  setup_tp_blocks();
  if (t == 1) {
    say(UNILLM_MSG("context parallel: ", cp, " processes split each micro-batch's tokens (embedding, norms, MLPs and "
                   "loss on their share) and each attention's heads (every head over the whole sequence: "
                   "DeepSpeed-Ulysses's layout, exchanged by all-gather and reduce-scatter; context-parallel rank ",
                   tp_rank(), "); ", held_weights()));
    return;
  }
  say(UNILLM_MSG("context parallel: ", cp, " × tensor parallel: ", t, ": ", cp * t, " processes split each "
                 "micro-batch's tokens (embedding, norms and loss on their share) and each attention's heads (every "
                 "head over the whole sequence); each run of ", t, " splits its context shard's MLPs by rows "
                 "(gate/up column-, down_proj row-parallel); context-parallel rank ", tp_rank() / t,
                 ", tensor-parallel rank ", tp_rank() % t, "; ", held_weights()));
}

std::string Run::held_weights() const {
  if (tp_blocks_)
    return UNILLM_MSG("every process holds the trainable weights whole and only its blocks of the ", tp_blocks_->layers(),
                      " frozen split weights: ", mib(tp_blocks_->kept_bytes()), " of ", mib(tp_blocks_->whole_bytes()),
                      " MiB (", blocks_read_whole_.empty() ? "cut as the model was read; " : "",
                      evaluates_split(evaluates_accuracy()) ? "evaluation runs split forwards as training does, "
                                                            : "evaluation gathers them a layer at a time around its forward, ",
                      checkpoint_is_trainable_only() ? "saving an adapter reads none of them"
                      : streams_blocks_on_save()     ? "saving a weight at a time"
                                                     : "saving whole for its duration",
                      blocks_read_whole_.empty() ? "" : "; the model was read whole first: " + blocks_read_whole_, ")");
  const std::string why = tp_blocks_fallback();
  return "every process holds the whole model" + (why.empty() ? std::string() : " — " + why);
}

bool Run::splits_lm_head(bool tied_trained_embedding) const {
  // tensor_parallel_output splits the lm_head of CausalLM::loss(); a stage with a loss of its own
  // multiplies the lm_head whole, as pipeline stages do in Stage::pipeline_head. A trained
  // embedding tied to the lm_head mixes a lookup gradient computed whole on every process
  // (without sequence parallelism) with the lm_head's per-process share: then it stays whole.
  return a_.tensor_degree > 1 && a_.context_degree == 1 && a_.tensor_parallel_output && stage_->model_token_loss() &&
         !(tied_trained_embedding && !a_.sequence_parallel) && a_.pipeline_degree <= 1;
}

void Run::setup_tensor_parallel() {
  if (a_.context_degree > 1) return setup_context_parallel();
  if (a_.tensor_degree == 1) {
    if (a_.sequence_parallel)
      say("sequence_parallel without tensor parallelism (tensor_parallel_degree 1) does nothing");
    return;
  }
  const bool sp = a_.sequence_parallel;
  if (sp && !stage_->model_token_loss())
    UNILLM_THROW(NotImplemented, "[train] ", a_.config_path, ": sequence_parallel with stage ", a_.stage,
                 a_.stage == "sft" || a_.stage == "pt" ? " and its loss variant" : "",
                 " is not implemented yet: its loss needs every token's hidden state (pt and sft's plain token "
                 "loss runs; tensor parallelism runs without sequence_parallel)");
  const bool tied_trained = model_->config().tie_word_embeddings && model_->lm_head_weight().requires_grad() && !sp;
  const bool staged = a_.pipeline_degree > 1;
  const bool vp = splits_lm_head(tied_trained);
  if (a_.tensor_parallel_output && !vp)
    say(staged ? std::string("tensor_parallel_output: the last pipeline stage computes the lm_head whole (splitting it "
                             "is not built with pipeline stages yet)")
        : tied_trained ? std::string("tensor_parallel_output: the lm_head is tied to the trained embedding, whose lookup "
                                   "gradient each process computes whole without sequence_parallel; each process "
                                   "computes the lm_head whole (set sequence_parallel to split it)")
                     : "tensor_parallel_output: stage " + a_.stage + "'s loss reads the whole lm_head; each process "
                       "computes it whole (pt and sft's token loss splits it)");
  make_tp_groups();
  try {
    model_->set_tensor_parallel(tp_group_.get(), sp, vp);
  } catch (const ConfigError& e) {
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": tensor_parallel_degree ", a_.tensor_degree, ": ",
                 e.what());
  }
  // Under sequence parallelism every gradient is a rank's own share (each runs the norms, the
  // embedding and the loss on its tokens): nothing is computed whole.
  // (By the tensor objects: under ZeRO-3 the parameters are views of units' storages that hold
  // memory only while gathered.)
  std::set<const Tensor*> split;
  for (const Tensor* t : model_->tensor_parallel_tensors())
    if (t->defined()) split.insert(t);
  std::vector<nn::Module*> trained{&model_->module()};
  for (nn::Module* m : stage_->extra_modules()) trained.push_back(m);
  for (nn::Module* m : trained)
    for (const nn::ParamRef& p : m->parameters())
      if (!sp && p.tensor->requires_grad() && !split.count(p.tensor)) tp_replicated_.push_back(p.tensor);
  // ZeRO-3 reduces each unit's gradients as backward leaves it: the drop happens there.
  if (shards_ && !counts_loss()) shards_->drop_gradients_of(tp_replicated_);
  setup_tp_blocks();
  say(UNILLM_MSG("tensor parallel: ", a_.tensor_degree, " processes split each layer's attention heads (q/k/v "
                 "column-parallel, o_proj row-parallel) and MLP rows (gate/up column-, down_proj row-parallel); ",
                 sp ? "sequence parallel: each runs the embedding, norms and loss on its share of the tokens"
                    : "the embedding and norms are computed whole on each",
                 vp ? "; the lm_head is split by vocabulary rows, with a parallel cross-entropy (tensor_parallel_output)"
                 : sp ? ""
                      : "; so is the lm_head",
                 shards_ && shards_->by_owner()
                     ? UNILLM_MSG("; each process holds its pipeline stage's layers whole (tensor-parallel rank ", tp_rank(), ")")
                 : shards_ && !shards_->keeps_whole() ? UNILLM_MSG("; every process gathers each whole layer just in time from ZeRO-3's shards (tensor-parallel rank ", tp_rank(), ")")
                 : UNILLM_MSG("; ", held_weights(), " (tensor-parallel rank ", tp_rank(), ")")));
}

std::string Run::tp_blocks_fallback() const {
  if (a_.pipeline_degree > 1) return "frozen split weights stay whole beside pipeline stages";
  if (a_.use_badam) return "frozen split weights stay whole under BAdam, which changes which layers train";
  return "";
}

void Run::setup_tp_blocks() {
  // ZeRO-3's units (or pipeline stages' owners) lay the parameters out already.
  if (!tp_blocks_fallback().empty() || !tp_group_ || (shards_ && !shards_->keeps_whole())) return;
  auto blocks = std::make_unique<TpBlocks>(model_->split_linears());
  if (!blocks->empty()) tp_blocks_ = std::move(blocks);
}

void Run::setup_expert_parallel() {
  const int64_t ep = a_.expert_degree;
  if (ep == 1) return;
  if (!h_.dp)
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": expert_parallel_degree ", ep,
                 " splits the experts over processes; run it under mpirun -np N or unillm launch --nproc N with N "
                 "a multiple of ", ep);
  dist::ProcessGroup& data = model_mesh_ ? model_mesh_->dp() : *h_.dp;
  if (data.size() % ep != 0)
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": expert_parallel_degree ", ep,
                 " must divide the data-parallel processes (", data.size(), " of ", world_size(),
                 "); run it under mpirun -np N or unillm launch --nproc N with N a multiple of ",
                 ep * (world_size() / data.size()));
  if (a_.tensor_degree > 1)
    UNILLM_THROW(NotImplemented, "[train] ", a_.config_path, ": expert parallelism beside tensor parallelism "
                 "is not implemented (tensor parallelism does not split sparse layers); use one of them");
  // Consecutive data-parallel ranks form a group (MPI_Comm_split: collective over `data`).
  ep_process_group_ = data.split(static_cast<int>(data.rank() / ep), static_cast<int>(data.rank() % ep));
  ep_group_ = std::make_unique<GroupCollective>(*ep_process_group_);
  try {
    model_->set_expert_parallel(ep_group_.get());
  } catch (const ConfigError& e) {
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": expert_parallel_degree ", ep, ": ", e.what());
  }
  const int64_t experts = model_->config().num_experts;
  if (holds_own_experts_only()) {
    auto shares = std::make_unique<ExpertShares>(model_->module(), experts, *ep_process_group_);
    if (!shares->empty()) expert_shares_ = std::move(shares);
  }
  say(UNILLM_MSG("expert parallel: groups of ", ep, " data-parallel processes; this one (rank ",
                 ep_group_->rank(), " of its group) runs experts ", ep_group_->rank() * experts / ep, "-",
                 (ep_group_->rank() + 1) * experts / ep - 1, " of each sparse layer for the group's tokens, "
                 "routes its own and holds ",
                 expert_shares_ ? UNILLM_MSG("only its own experts' frozen weights: ", mib(expert_shares_->kept_bytes()),
                                             " of ", mib(expert_shares_->whole_bytes()), " MiB (",
                                             blocks_read_whole_.empty() ? "the others' let go as the model was read; " : "",
                                             evaluates_accuracy() ? "evaluation (its token accuracy) and saving have"
                                                                  : "evaluation runs expert-parallel forwards; saving has",
                                             " the others broadcast by their runners for their duration)")
                                : std::string("every expert's weights")));
}

bool Run::holds_own_experts_only() const {
  // ZeRO-3's units lay the parameters out already; BAdam changes which layers train as it goes.
  return a_.expert_degree > 1 && !a_.use_badam && !(shards_ && !shards_->keeps_whole());
}

void Run::drop_replicated_grads(int64_t lo, int64_t hi) {
  if (!tp_group_ || counts_loss() || shards_) return;  // ZeRO-3: ParamShards::drop_gradients_of
  const float* base = arena_->grads();
  for (const Tensor* t : tp_replicated_) {
    Tensor g = t->grad();  // a view of the arena's gradients
    if (!g.defined()) continue;
    const int64_t at = g.data<float>() - base, n = g.numel();
    const int64_t from = std::max(lo, at), to = std::min(hi, at + n);
    if (from < to) g.view({n}).slice(0, from - at, to - at).fill(0);
  }
}

}  // namespace unillm::train::detail
