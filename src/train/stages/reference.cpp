// The preference stages' reference log-probs (see reference.h).
#include "train/stages/reference.h"

#include <chrono>
#include <filesystem>

#include "autograd/grad_mode.h"
#include "data/error.h"
#include "io/json_file.h"
#include "models/adapter.h"
#include "ops/sequence_logprobs.h"
#include "train/finetune.h"
#include "train/param_shards.h"
#include "train/stages/stage.h"

namespace unillm::train {

namespace fs = std::filesystem;

const char* ref_kind_name(RefKind k) {
  switch (k) {
    case RefKind::adapters_off: return "the policy with its adapters off";
    case RefKind::copy: return "a frozen copy";
    case RefKind::precomputed: return "precomputed log-probs";
  }
  return "";
}

std::vector<double> row_logps(models::CausalLM& model, const data::Batch& b,
                              const std::optional<std::vector<std::string>>& adapters, bool shift_attn) {
  autograd::NoGradGuard no_grad;
  models::TrainBatch tb = to_train_batch(b);
  tb.adapters = adapters;
  set_shift_attn(tb, shift_attn);
  const Tensor x = model.hidden_states(tb, false);
  return ops::sequence_logprobs(x, model.lm_head_weight(), models::shifted_labels(tb.labels), b.seq_len).values;
}

std::unique_ptr<Reference> Reference::adapters_off() {
  return std::unique_ptr<Reference>(new Reference(RefKind::adapters_off));
}

std::unique_ptr<Reference> Reference::copy(std::unique_ptr<models::CausalLM> model,
                                           std::shared_ptr<void> placement) {
  for (auto& p : model->module().parameters()) p.tensor->set_requires_grad(false);
  std::unique_ptr<Reference> r(new Reference(RefKind::copy));
  r->model_ = std::move(model);
  r->placement_ = std::move(placement);
  return r;
}

namespace {

std::vector<double> all_rows(models::CausalLM& m, const data::TokenizedDataset& ds, const data::LoaderOptions& lo,
                             int64_t batch_examples) {
  std::vector<double> out(static_cast<size_t>(ds.num_rows()), 0.0);
  for (int64_t e = 0; e < ds.num_examples(); e += batch_examples) {
    const std::vector<int64_t> rows = data::group_rows(ds, e, std::min(batch_examples, ds.num_examples() - e));
    const std::vector<double> v = row_logps(m, data::make_batch(ds, rows, lo), std::nullopt);
    for (size_t i = 0; i < rows.size(); ++i) out[rows[i]] = v[i];
  }
  return out;
}

}  // namespace

std::unique_ptr<Reference> Reference::precompute(models::CausalLM& initial, const data::TokenizedDataset& train,
                                                 const data::TokenizedDataset& eval, const data::LoaderOptions& lo,
                                                 int64_t batch_examples) {
  std::unique_ptr<Reference> r(new Reference(RefKind::precomputed));
  r->train_ = all_rows(initial, train, lo, batch_examples);
  if (eval.num_rows() > 0) r->eval_ = all_rows(initial, eval, lo, batch_examples);
  return r;
}

std::unique_ptr<Reference> Reference::load(const std::string& dir, const data::TokenizedDataset& train,
                                           const data::TokenizedDataset& eval) {
  const std::string path = (fs::path(dir) / "reference_logps.json").string();
  if (!fs::exists(path))
    UNILLM_THROW(IoError, "[train] ", path, " is missing: this checkpoint of a run with precomputed reference "
                 "log-probs cannot resume without them");
  const nlohmann::json j = io::read_json_file(path);
  std::unique_ptr<Reference> r(new Reference(RefKind::precomputed));
  auto take = [&](const char* key, const data::TokenizedDataset& ds, std::vector<double>& out) {
    if (!j.contains(key) || !j[key].is_array() || static_cast<int64_t>(j[key].size()) != ds.num_rows())
      UNILLM_THROW(data::DataError, "[train] ", path, ": '", key, "' does not hold one log-prob per ", key,
                   " row (", ds.num_rows(), "): the data changed since the checkpoint");
    out = j[key].get<std::vector<double>>();
  };
  take("train", train, r->train_);
  take("eval", eval, r->eval_);
  return r;
}

std::vector<double> Reference::logps(models::CausalLM& policy, const data::Batch& b, bool eval, bool shift_attn) {
  switch (kind_) {
    case RefKind::adapters_off: return row_logps(policy, b, std::vector<std::string>{}, shift_attn && !eval);
    case RefKind::copy: return row_logps(*model_, b, std::nullopt);
    case RefKind::precomputed: break;
  }
  const std::vector<double>& table = eval ? eval_ : train_;
  std::vector<double> out;
  for (int64_t r : b.row_indices) {
    if (r < 0 || r >= static_cast<int64_t>(table.size()))
      UNILLM_THROW(ShapeError, "[train] row ", r, " has no precomputed reference log-prob");
    out.push_back(table[r]);
  }
  return out;
}

void Reference::save(const std::string& dir) const {
  if (kind_ != RefKind::precomputed) return;
  // nlohmann writes doubles with enough digits to read them back exactly.
  io::write_file_atomic((fs::path(dir) / "reference_logps.json").string(),
                        nlohmann::json{{"train", train_}, {"eval", eval_}}.dump());
}

std::string plan_reference(const TrainArgs& a, MemoryPlanInputs& in, int64_t limit, int64_t rows, RefKind& kind) {
  kind = RefKind::adapters_off;
  const bool adapters_off = a.adapter_tuning() && a.ref_model.empty();
  if (adapters_off && a.ref_mode != "precompute") return "";
  MemoryPlanInputs copy = in, table = in;
  copy.reference_weights = in.params.base;  // the copy has the policy's shape
  copy.reference_weight_bytes = in.frozen_weight_bytes;
  // Adapters merged into it or its weights quantised as read: it is whole once loaded.
  copy.reference_loaded_whole = !a.ref_model_adapters.empty() || (a.ref_model_quantization_bit > 0 && !a.ref_model.empty());
  table.reference_logps_rows = rows;
  const bool fits = limit <= 0 || plan_memory(copy).peak <= limit;
  kind = a.ref_mode == "model" || (a.ref_mode == "auto" && fits) ? RefKind::copy : RefKind::precomputed;
  in = kind == RefKind::copy ? copy : table;
  if (kind == RefKind::copy && !fits)
    return "ref_mode: precompute keeps 8 bytes per row instead of the reference copy (" +
           format_bytes(copy.reference_weights * copy.reference_weight_bytes) + ")";
  return "";
}

namespace {

// A reference model and, under ZeRO-3, its shards (the model's parameters point into them).
struct LoadedReference {
  std::unique_ptr<models::CausalLM> model;
  std::shared_ptr<ParamShards> shards;
};

// A reference copy: the initial policy's source (model_name_or_path, or ref_model with
// ref_model_adapters merged), frozen weights in the run's frozen dtype. A quantised ref_model keeps
// its one adapter unmerged over the quantised weights, as LLaMA-Factory's load_model does for a
// quantised base (it accepts a single adapter there and does not merge it).
// Under ZeRO-3 (ctx.shard_frozen_over, and `shard`) it is sharded: loaded straight into its
// shards when nothing changes the weights after loading, else sharded once loaded; beside
// pipeline stages holding their own layers (ctx.frozen_layer_owners) each stage keeps its own.
LoadedReference load_reference(const TrainArgs& a, const PrepareContext& ctx, bool shard) {
  const std::string dir = a.ref_model.empty() ? ctx.model_dir : resolve_model_path(a.ref_model, ctx.hf_cache_root);
  const bool quantised = a.ref_model_quantization_bit > 0 && !a.ref_model.empty();
  ctx.say("reference: loading " + dir +
          (a.ref_model_adapters.empty() ? "" : quantised ? " with its ref_model_adapter over the quantised weights"
                                                         : " with ref_model_adapters merged"));
  models::LoadOptions lo = ctx.frozen_load;
  if (quantised) {
    // LLaMA-Factory's ref_model_quantization_bit: the reference as QLoRA holds its base, each
    // projection quantised as it is read (bitsandbytes' formats, the run's quantization_type).
    TrainArgs q = a;  // (QLoRA's rules are the policy's: the reference trains nothing)
    q.quantization_bit = a.ref_model_quantization_bit;
    q.finetuning_type = "lora";
    q.adapter_name_or_path.clear();
    lo.on_linear_loaded = qlora_load_hook(q);
    ctx.say(UNILLM_MSG("reference: ref_model quantised to ", q.quantization_bit, " bits (",
                       q.quantization_bit == 4 ? q.quantization_type : std::string("int8"), ")"));
  }
  shard = shard && ctx.shard_frozen_over;
  const bool by_owner = !ctx.frozen_layer_owners.empty();
  auto frozen_shards = [&ctx, by_owner](models::CausalLM& m) {
    for (auto& p : m.module().parameters()) p.tensor->set_requires_grad(false);
    const bool tied = m.config().tie_word_embeddings;
    if (by_owner)
      return std::make_shared<ParamShards>(m.module(), tied, *ctx.shard_frozen_over,
                                           ParamShards::Owners{ctx.frozen_layer_owners});
    return std::make_shared<ParamShards>(m.module(), tied, *ctx.shard_frozen_over);
  };
  std::shared_ptr<ParamShards> shards;
  const bool straight = shard && a.ref_model_adapters.empty() && !quantised;
  if (straight) {
    lo.lazy = true;
    lo.on_built = [&](models::CausalLM& m) {
      shards = frozen_shards(m);
      shards->begin_frozen_load();
    };
    lo.before_copy = [&shards](const Tensor& t) { shards->before_copy(t); };
  }
  auto m = models::load_causal_lm(dir, lo);
  if (straight) shards->loaded();
  for (size_t i = 0; i < a.ref_model_adapters.size(); ++i) {
    const std::string name = "ref" + std::to_string(i);
    models::load_adapter(*m, a.ref_model_adapters[i], name);
    if (quantised)
      m->set_active_adapters({name});  // the reference's forward runs it (checked: one adapter)
    else
      models::merge_adapter(*m, name);
  }
  if (shard && !shards) {
    shards = frozen_shards(*m);
    shards->shard_frozen();
  }
  if (shards) {
    ParamShards* s = shards.get();
    m->set_layer_hooks({[s](int64_t l) { s->before_forward(l); }, [s](int64_t l) { s->after_forward(l); }, {}});
    if (by_owner)
      ctx.say(std::string("pipeline parallel: the reference model holds only this stage's layers") +
              (straight ? ", loaded straight into them" : "") + ": " + s->describe());
    else
      ctx.say(std::string("ZeRO stage 3: the reference model's parameters sharded too") +
              (straight ? ", loaded straight into its shards" : "") + ", in " + s->describe());
    if (ctx.frozen_sharded) ctx.frozen_sharded(s);
  }
  return {std::move(m), std::move(shards)};
}

}  // namespace

std::unique_ptr<Reference> make_reference(RefKind kind, const TrainArgs& a, models::CausalLM& policy,
                                          const PrepareContext& ctx) {
  if (kind == RefKind::adapters_off) return Reference::adapters_off();
  if (kind == RefKind::precomputed && !ctx.resume_dir.empty()) {
    ctx.say("reference: precomputed log-probs from " + ctx.resume_dir);
    return Reference::load(ctx.resume_dir, *ctx.train, *ctx.eval);
  }
  // The initial policy: the policy itself before step 1 when it is the reference's source (full
  // or freeze from model_name_or_path, LoRA at its initial adapter), else a loaded copy.
  const bool policy_is_initial = a.ref_model.empty() && ctx.resume_dir.empty();
  LoadedReference r;
  if (kind == RefKind::copy || !policy_is_initial) r = load_reference(a, ctx, kind == RefKind::copy);
  std::unique_ptr<models::CausalLM>& loaded = r.model;
  std::unique_ptr<Reference> ref;
  if (kind == RefKind::copy) {
    ref = Reference::copy(std::move(loaded), std::move(r.shards));
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    ref = Reference::precompute(loaded ? *loaded : policy, *ctx.train, *ctx.eval, ctx.loader,
                                std::max<int64_t>(1, a.per_device_eval_batch_size));
    ctx.say(UNILLM_MSG("reference: log-probs of ", ctx.train->num_rows() + ctx.eval->num_rows(),
                       " rows precomputed in ",
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s"));
  }
  ctx.say(std::string("reference: ") + ref_kind_name(kind));
  return ref;
}

}  // namespace unillm::train
