// Where ZeRO stage 3 shards the parameters, and how its policy is loaded (docs/ARCHITECTURE.md,
// "ZeRO stage 3") and over which processes ZeRO shards: the trainer's decisions, kept beside each
// other.
#include "dist/mesh.h"
#include "models/inference_bundle.h"
#include "train/finetune.h"
#include "train/trainer_run.h"
#include "train/vocab.h"
#include "train/zero.h"

namespace unillm::train::detail {

std::string Run::zero3_fallback() const {
  // (Tensor parallelism's processes run every layer in the same order, so they gather in step;
  // pipeline stages run different layers: each stage's data-parallel replicas shard among
  // themselves, shard_groups().)
  if (model_mesh_ && a_.pipeline_degree > 1) {
    if (model_mesh_->shape().dp == 1) return "under pipeline parallelism with one data-parallel replica per stage";
    if (model_mesh_->shape().tp > 1)
      return "under pipeline parallelism beside tensor or context parallelism (each stage's replicas would "
             "shard per tensor-parallel rank)";
    if (a_.expert_degree > 1) return "under pipeline parallelism beside expert parallelism";
  }
  if (sharding_degree() == 1 && world_size() > 1) return "with sharding_parallel_degree 1 (no sharding group)";
  if (a_.use_dora) return "with DoRA (its magnitude reads whole weights outside the layer's backward)";
  if (a_.finetuning_type == "oft") return "with OFT (its rotations are built from whole parameters)";
  if (a_.quantization_bit > 0) return "with QLoRA (the quantised base is not a parameter)";
  return "";
}

std::string Run::own_layers_fallback() const {
  if (a_.expert_degree > 1) return "beside expert parallelism";
  if (a_.use_dora) return "with DoRA (its magnitude reads whole weights outside the layer's backward)";
  if (a_.finetuning_type == "oft") return "with OFT (its rotations are built from whole parameters)";
  if (a_.quantization_bit > 0) return "with QLoRA (the quantised base is not a parameter)";
  if (const std::string kind = optimizer_config(a_).kind; !zero_shardable(kind))
    return "with optimizer " + kind + " (its update reads whole matrices; AdamW and SGD are split by stage)";
  return "";
}

bool Run::stages_own_layers() const {
  // ZeRO-3 where it shards (each stage's replicas share pieces of every layer) keeps its layout.
  if (!a_.do_train || !model_mesh_ || a_.pipeline_degree == 1) return false;
  if (a_.zero_stage == 3 && world_size() > 1 && zero3_fallback().empty()) return false;
  return own_layers_fallback().empty();
}

std::string Run::policy_whole_load_reason(const std::string& from, bool casts_as_read) const {
  const bool lora = a_.adapter_tuning();
  if (a_.train_from_scratch && (from.empty() || lora)) return "train_from_scratch initialises every weight";
  if (wants_resize(a_) && (from.empty() || lora)) return "resize_vocab grows the embedding from its rows' mean";
  if (lora && a_.pissa_init) return "PiSSA initialises the adapter from the base weights";
  if (lora && a_.adapter_name_or_path.size() > (a_.create_new_adapter ? 0U : 1U))
    return "adapter_name_or_path's adapters are merged into the base";
  if (low_precision_dtype(a_) != DType::f32 && !lora && (a_.finetuning_type == "freeze" || a_.use_badam) &&
      !casts_as_read)
    return "the frozen matrices are cast to " + std::string(dtype_name(low_precision_dtype(a_))) + " after loading";
  if (models::read_inference_plan(from.empty() || lora ? model_dir_ : from)) return "an inference bundle";
  return "";
}

// ZeRO's sharding group and the replicas holding this rank's part elsewhere (trainer_run.h).
std::pair<dist::ProcessGroup*, dist::ProcessGroup*> Run::shard_groups(bool zero3) {
  const int world = static_cast<int>(world_size());
  if (zero3 && model_mesh_ && a_.pipeline_degree > 1) {  // (zero3_fallback: no tensor axis here)
    shard_replicas_ = &model_mesh_->pp();
    return {&model_mesh_->dp(), shard_replicas_};
  }
  if (sharding_degree() <= 1 || sharding_degree() >= world) return {h_.dp, nullptr};
  if (!mesh_)
    mesh_ = std::make_unique<dist::DeviceMesh>(*h_.dp, dist::mesh_shape(world, 1, 1, static_cast<int>(sharding_degree())));
  shard_replicas_ = &mesh_->dp();
  return {&mesh_->sharding(), shard_replicas_};
}

}  // namespace unillm::train::detail
