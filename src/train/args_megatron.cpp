// LLaMA-Factory's Megatron paths: `USE_MCA=1 llamafactory-cli train` (mcore_adapter,
// examples/megatron/) and `USE_MEGATRON_BRIDGE=1` (Megatron Bridge, examples/megatron_bridge/).
// Their keys (MegatronBridgeArguments, and the same names in mcore_adapter's TrainingArguments)
// ask for the parallelism unillm has under other names, so they map onto it
// (docs/training.md "LLaMA-Factory's Megatron keys"):
//   tensor_model_parallel_size → tensor parallelism (PaddleNLP's tensor_parallel_degree)
//   pipeline_model_parallel_size, virtual_pipeline_model_parallel_size → pipeline parallelism
//   expert_model_parallel_size → expert parallelism (PaddleNLP's expert_parallel_degree)
//   context_parallel_size → context parallelism (PaddleNLP's context_parallel_degree)
//   use_distributed_optimizer → ZeRO stage 1 (Megatron's distributed optimizer shards the
//     optimizer state and fp32 master weights over the data-parallel processes)
//   recompute_granularity full | selective → activation recomputation (of whole layers here)
//   calculate_per_token_loss → how micro-batch losses combine (TrainArgs::micro_batch_mean_loss)
//   use_packed_sequences → neat_packing (Megatron's packed rows keep per-sequence attention)
//   mixed_precision bf16_mixed | fp16_mixed → bf16 | fp16
// fp8 recipes, Megatron-format checkpoints and
// extra_config's dot-path overrides are refused. Kernel fusions, overlap switches, the MoE
// dispatcher and the pipeline-split accounting change speed and layout, not the trained model:
// the key table accepts them with a warning. use_kt (KTransformers' CPU expert kernels behind a
// GPU run) is the run the rest of the config describes: unillm runs every layer with its own
// kernels on --device.
#include <map>
#include <string>

#include "core/error.h"
#include "train/args_internal.h"

namespace unillm::train::detail {

namespace {

// A Megatron size: an integer ≥ 1 (null keeps the provider's default, 1).
std::optional<int64_t> size_of(const Field& f) {
  if (f.node.IsNull()) return std::nullopt;
  return get_int(f, 1);
}

}  // namespace

bool set_megatron_field(TrainArgs& a, const Field& f) {
  using Setter = void (*)(TrainArgs&, const Field&);
  static const std::map<std::string, Setter> m = {
      {"tensor_model_parallel_size", [](TrainArgs& a, const Field& f) { a.megatron.tp = size_of(f); }},
      {"pipeline_model_parallel_size", [](TrainArgs& a, const Field& f) { a.megatron.pp = size_of(f); }},
      {"virtual_pipeline_model_parallel_size", [](TrainArgs& a, const Field& f) { a.megatron.vpp = size_of(f); }},
      {"context_parallel_size", [](TrainArgs& a, const Field& f) { a.megatron.cp = size_of(f); }},
      {"expert_model_parallel_size", [](TrainArgs& a, const Field& f) { a.megatron.ep = size_of(f); }},
      {"recompute_granularity",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull()) return;
         get_choice(f, {"full", "selective"});
         // Megatron's selective recomputes only the core attention; unillm recomputes whole
         // layers: the same gradients for more compute.
         a.disable_gradient_checkpointing = false;
       }},
      {"recompute_method",
       [](TrainArgs&, const Field& f) {
         if (!f.node.IsNull()) get_choice(f, {"uniform", "block"});
       }},
      {"recompute_num_layers",
       [](TrainArgs&, const Field& f) {
         if (!f.node.IsNull()) get_int(f, 1);
       }},
      {"calculate_per_token_loss",
       [](TrainArgs& a, const Field& f) {
         // null keeps unillm's token weighting, which is what true asks for.
         a.micro_batch_mean_loss = !f.node.IsNull() && !get_bool(f);
       }},
      {"use_distributed_optimizer",
       [](TrainArgs& a, const Field& f) {
         if (!get_bool(f) || a.zero_stage > 0) return;  // a ZeRO key given beside it says more
         a.zero_stage = 1;
         a.zero_from = f.where + " (use_distributed_optimizer: Megatron's distributed optimizer)";
       }},
      {"use_packed_sequences",
       [](TrainArgs& a, const Field& f) {
         if (get_bool(f)) a.neat_packing = a.packing = a.packing_given = true;
       }},
      {"mixed_precision",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull()) return;
         const std::string v = get_string(f);
         if (v == "bf16_mixed") {
           a.bf16 = true;
         } else if (v == "fp16_mixed") {
           a.fp16 = true;
         } else if (v == "fp32" || v == "32") {
         } else if (v.find("fp8") != std::string::npos || v.find("fp4") != std::string::npos) {
           not_implemented(f, "'" + v + "' (fp8/fp4 training needs fp8 matrix units; unillm computes in f32, bf16 or f16)");
         } else {
           bad_value(f, "bf16_mixed, fp16_mixed or fp32");
         }
       }},
      {"megatron_pretrained_checkpoint",
       [](TrainArgs&, const Field& f) {
         if (!is_off(f.node))
           not_implemented(f, "loading a Megatron distributed checkpoint (torch_dist); unillm reads the Hugging Face "
                              "checkpoint model_name_or_path names");
       }},
      {"extra_config",
       [](TrainArgs&, const Field& f) {
         if (!is_off(f.node)) not_implemented(f, "Megatron Bridge's dot-path overrides of its own config containers");
       }},
      // Megatron Bridge writes Megatron checkpoints and converts to HF at the end when asked;
      // unillm's checkpoints and output are HF's format either way.
      {"export_hf_on_finish", [](TrainArgs&, const Field& f) { get_bool(f); }},
      {"use_megatron_bridge", [](TrainArgs&, const Field& f) { get_bool(f); }},
      {"use_kt",
       [](TrainArgs& a, const Field& f) {
         if (get_bool(f))
           a.warnings.push_back("[config] " + f.where +
                                ": use_kt: KTransformers runs a GPU job's MoE experts on the CPU with its AMX kernels; "
                                "unillm runs every layer with its own kernels on --device: the same " +
                                "fine-tuning, trained where unillm runs");
       }},
  };
  auto it = m.find(f.key);
  if (it == m.end()) return false;
  it->second(a, f);
  return true;
}

void finish_megatron_args(TrainArgs& a, const std::string& where, Problems& problems) {
  // Each size, unless the PaddleNLP degree beside it asks for another.
  auto apply = [&](const std::optional<int64_t>& size, int64_t& degree, const char* key, const char* other) {
    if (!size) return;
    if (degree > 1 && *size != degree)
      problems.add(UNILLM_MSG("[config] ", where, ": ", key, " ", *size, " and ", other, " ", degree,
                              " ask for two sizes"),
                   true);
    else
      degree = *size;
  };
  apply(a.megatron.tp, a.tensor_degree, "tensor_model_parallel_size", "tensor_parallel_degree");
  apply(a.megatron.pp, a.pipeline_degree, "pipeline_model_parallel_size", "pipeline_parallel_degree");
  apply(a.megatron.vpp, a.virtual_pp_degree, "virtual_pipeline_model_parallel_size", "virtual_pp_degree");
  apply(a.megatron.ep, a.expert_degree, "expert_model_parallel_size", "expert_parallel_degree");
  apply(a.megatron.cp, a.context_degree, "context_parallel_size", "context_parallel_degree");
}

}  // namespace unillm::train::detail
