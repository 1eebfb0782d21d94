// Pipeline parallelism in a training run (train/pipeline.h): the pp × dp mesh, the pipeline over
// the loaded model, the stages' own layers (ParamShards by owner), and a step's micro-batches
// through it. Everything after the micro-batches — summing gradients, clipping, the optimizer,
// evaluation, checkpoints — is stage 3's path over the stages' shards where they hold their own
// layers, and the data-parallel path's elsewhere (the processes a stage does not run hold zero
// gradients for its layers).
#include <algorithm>
#include <cmath>

#include "dist/gather_strings.h"
#include "train/trainer_run.h"
#include "train/zero.h"

namespace unillm::train::detail {

void Run::setup_model_mesh() {
  const int64_t cp = a_.context_degree;
  // Context parallelism's group is the mesh's tp axis (docs/ARCHITECTURE.md, CP).
  const int64_t pp = a_.pipeline_degree, tp = a_.tensor_degree * cp, world = world_size();
  if (pp == 1 && a_.virtual_pp_degree == 1 && tp == 1) return;
  if (pp == 1 && a_.virtual_pp_degree > 1)
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": virtual_pp_degree ",
                 a_.virtual_pp_degree, " needs pipeline_parallel_degree > 1");
  if (world % (pp * tp) != 0) {
    std::string degrees;  // the model-parallel sizes asked for, as "a × b"
    for (const auto& [key, n] : {std::pair<const char*, int64_t>{"context_parallel_degree", cp},
                                 {"tensor_parallel_degree", a_.tensor_degree}, {"pipeline_parallel_degree", pp}})
      if (n > 1) degrees += (degrees.empty() ? "" : " × ") + UNILLM_MSG(key, " ", n);
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": ", degrees, " does not divide the ", world,
                 " processes (run it under mpirun -np N or unillm launch --nproc N with N a multiple of ", pp * tp, ")");
  }
  model_mesh_ = std::make_unique<dist::DeviceMesh>(
      *h_.dp, dist::mesh_shape(static_cast<int>(world), static_cast<int>(tp), static_cast<int>(pp), 1));
  // PaddleNLP's sharding_parallel_degree counts the processes that share one model-parallel
  // shard's optimizer state. Stages holding their own layers split theirs over the stage's
  // replicas; elsewhere every process holds the whole model, so ZeRO shards the state over all of
  // them (each keeps 1/world of it, what tp · pp · sharding ranks each keep there).
  if (a_.sharding_degree > 1 && a_.sharding_degree != world && a_.zero_stage == 0)
    say(UNILLM_MSG("sharding_parallel_degree ", a_.sharding_degree, " without `sharding` (stage1, stage2 or stage3): "
                   "nothing is sharded"));
  else if (a_.sharding_degree > 1 && a_.sharding_degree != world)
    say(stages_own_layers()
            ? UNILLM_MSG("sharding_parallel_degree ", a_.sharding_degree, " under pipeline parallelism: each stage "
                         "holds its own layers, and ZeRO splits their optimizer state over the stage's ", world / pp,
                         " processes (its data-parallel and tensor-parallel ranks)")
            : UNILLM_MSG("sharding_parallel_degree ", a_.sharding_degree, " under ", pp > 1 ? "pipeline" : "tensor",
                         " parallelism: every process holds the whole model, so ZeRO shards the optimizer state over all ",
                         world, " processes"));
}

void Run::setup_pipeline() {
  if (!model_mesh_ || a_.pipeline_degree == 1) return;
  pipeline_ = std::make_unique<Pipeline>(model_mesh_->pp(), static_cast<int>(a_.virtual_pp_degree), model_->config());
  say(UNILLM_MSG("pipeline parallel: ", a_.pipeline_degree, " stages",
                 a_.virtual_pp_degree > 1
                     ? UNILLM_MSG(" × ", a_.virtual_pp_degree, " virtual (interleaved)")
                     : std::string(" (1F1B)"),
                 ", ", dp_size(), " data-parallel replica", dp_size() > 1 ? "s" : "",
                 "; each process runs its stage's layers and ",
                 shards_ && shards_->by_owner()
                     ? std::string("holds only its own layers' weights, gradients and optimizer state (their gradients "
                                   "summed over the stage's replicas); ")
                 : shards_ && !shards_->keeps_whole() ? UNILLM_MSG("keeps 1/", dp_size(), " of every weight (ZeRO-3 among the stage's replicas; "
                                      "the stages' gradient shards are summed, zero where a stage does not run a layer); ")
                         : std::string("holds the whole model (the gradients of the layers it does not run are zero "
                                       "and are summed over the processes, so every process keeps every weight); "),
                 evaluates_through_pipeline(evaluates_accuracy())
                     ? "evaluation runs forward only through the stages; "
                     : "evaluation runs whole forwards on every process; ",
                 "each step's order of forwards (F) and backwards (B) per micro-batch:\n",
                 pipeline_->describe(static_cast<int>(a_.gradient_accumulation_steps))));
}

void Run::setup_owned_layers(const std::vector<nn::Module*>& trainable, const OptimizerConfig& oc,
                             const std::function<void(ParamArena& shard)>& place,
                             const std::function<void()>& placed) {
  // The pipeline group is the sharding group, each unit whole on its stage; a stage's replicas
  // (its data-parallel and tensor/context-parallel processes, each holding the stage's layers
  // whole) sum its gradients and, under ZeRO-1/2, split its optimizer state by range.
  dist::ProcessGroup& pp = model_mesh_->pp();
  if (model_mesh_->shape().tp > 1)  // (every process calls split)
    stage_group_ = model_mesh_->world().split(model_mesh_->coord().pp, static_cast<int>(world_rank()));
  dist::ProcessGroup* replicas = stage_group_ ? stage_group_.get() : dp_size() > 1 ? &model_mesh_->dp() : nullptr;
  shard_replicas_ = replicas;
  ParamShards::Owners owners;
  owners.layer_owner = pipeline_layer_owners(model_->config(), static_cast<int>(a_.pipeline_degree),
                                             static_cast<int>(a_.virtual_pp_degree));
  shards_ = std::make_unique<ParamShards>(trainable, model_->config().tie_word_embeddings, *arena_, pp, owners);
  const bool split = a_.zero_stage > 0 && replicas;
  auto sharded = [&](ParamArena& shard) {
    place(shard);
    std::string zero;
    if (split)
      zero = UNILLM_MSG("; ZeRO stage ", a_.zero_stage, " from ", a_.zero_from, ": the stage's optimizer state split over its ",
                        replicas->size(), stage_group_ ? " processes" : " data-parallel replicas");
    else if (a_.zero_stage > 0)
      zero = UNILLM_MSG("; ZeRO stage ", a_.zero_stage, " from ", a_.zero_from, ": nothing more to split (one "
                        "replica per stage, which keeps only its own layers' optimizer state)");
    say("pipeline parallel: " + shards_->describe() + zero);
    placed();
  };
  opt_ = std::make_unique<ZeroOptimizer>(*arena_, pp, shards_->pieces(),
                                         [&oc](ParamArena& shard) { return make_optimizer(shard, oc); }, sharded,
                                         replicas, split);
}

std::pair<double, double> Run::pipeline_micros(const std::vector<data::Batch>& group, const MicroOptions& mo,
                                               uint64_t step_seed) {
  const int64_t dp = dp_size(), me = dp_rank();
  std::vector<Pipeline::Micro> micros;
  std::vector<const data::Batch*> mine;
  std::vector<models::TrainBatch> policy;
  for (size_t i = 0; i < group.size(); ++i) {
    if (static_cast<int64_t>(i) % dp != me) continue;
    Pipeline::Micro m;
    m.dropout_seed =
        step_seed + 0x9E3779B97F4A7C15ull * (i + 1);  // train_step's per-micro-batch seed
    m.batch = stage_->pipeline_batch(*model_, group[i], Rng(m.dropout_seed), mo);
    mine.push_back(&group[i]);
    policy.push_back(m.batch);
    micros.push_back(std::move(m));
  }
  // Under expert parallelism every forward communicates with the other pipelines' stages, and
  // under ZeRO-3 a stage's replicas gather its layers together: a pipeline short of micro-batches
  // in the epoch's last step runs stand-ins (its first micro-batch again, loss and load-balancing
  // seeded with zero, so every gradient it adds is zero; result dropped) so that all run as many.
  const size_t real = micros.size();
  const auto most_micros = static_cast<size_t>((group.size() + dp - 1) / dp);
  if (expert_parallel() || (shards_ && !shards_->by_owner()))
    while (micros.size() < most_micros) {
      Pipeline::Micro m;
      m.dropout_seed = step_seed;
      m.batch = stage_->pipeline_batch(*model_, group[0], Rng(m.dropout_seed), mo.expert_stand_in());
      policy.push_back(m.batch);
      mine.push_back(&group[0]);
      micros.push_back(std::move(m));
    }
  models::CausalLM& model = *model_;
  // ZeRO-3: the root unit (and the head unit where the stage reads it: the loss's, or the first's
  // with a tied embedding) gathered with gradient buffers for the whole step, as for one
  // micro-batch elsewhere: the stage's micro-batches interleave (so no eager head either). Each
  // layer gathers around its forwards and backwards as ever, within the stage's replicas
  // (Run::shard_groups).
  if (shards_)
    shards_->begin_micro(false, false,
                         pipeline_->holds_loss() || (model_mesh_->coord().pp == 0 && model_->config().tie_word_embeddings));
  // The forward-only passes the stage's head needs (references, KTO's KL rows) run first.
  stage_->pipeline_prepare(model, mine, policy,
                           [&](models::CausalLM& m, const std::vector<models::TrainBatch>& batches,
                               const std::function<void(int, const Tensor&)>& last) {
                             pipeline_->forward_only(m, batches, last);
                           });
  const auto seed = static_cast<float>(mo.seed);  // as the stages' train_micro rounds it
  double aux = 0;
  const std::vector<double> losses = pipeline_->run(
      model, micros, seed, mo.recompute, [&](const Tensor& x, int i, const models::TrainBatch& b, double hint) {
        MicroOptions o = mo;
        o.seed = hint;
        if (static_cast<size_t>(i) >= real) {  // a stand-in: zero seeds, its figures dropped
          o.stand_in = true;
          o.aux_seed = 0;
          Stage::PipelineHead h = stage_->pipeline_head(model, x, i, *mine[static_cast<size_t>(i)], b, o);
          std::fill(h.grad.begin(), h.grad.end(), 0.0f);
          return Pipeline::HeadOut{h.root, std::move(h.grad), 0.0};
        }
        Stage::PipelineHead h = stage_->pipeline_head(model, x, i, *mine[static_cast<size_t>(i)], b, o);
        // The last stage's figures; the interval's are merged over the processes when logged.
        if (counts_loss()) {
          accumulate_metrics(interval_metrics_, h.result.metrics);
          add_sums(interval_sums_, h.result.sums);
        }
        aux += h.result.aux_loss;
        return Pipeline::HeadOut{h.root, std::move(h.grad), h.result.loss};
      });
  if (shards_) shards_->end_micro();
  // A replica short of micro-batches in the epoch's last group sits out the rounds it has none in
  // on its loss stage, where a stage exchanges per round (BCO), as train_step's loop does.
  if (pipeline_->holds_loss()) {
    const auto most = static_cast<int64_t>((group.size() + dp - 1) / dp);
    for (auto k = static_cast<int64_t>(micros.size()); k < most; ++k) stage_->idle_round(/*evaluation=*/false);
  }
  // What the last stage's head carries between steps (BCO's baseline) goes to the other stages,
  // which evaluate and write checkpoints with it too.
  if (stage_->keeps_head_state()) {
    const std::vector<std::string> states =
        dist::allgather_strings(model_mesh_->pp(), pipeline_->holds_loss() ? stage_->head_state() : "");
    if (!pipeline_->holds_loss()) stage_->set_head_state(states.back());
  }
  double sum = 0;
  for (double l : losses) {
    if (!std::isfinite(l)) stop_non_finite("the loss", l);
    sum += l;
  }
  return {sum, aux};
}

}  // namespace unillm::train::detail
