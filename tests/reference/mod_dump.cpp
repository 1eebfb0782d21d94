// The unillm half of mod_check.py (run by it, not by ctest directly):
//   mod_dump MODEL_DIR IN OUT [recompute]
// MODEL_DIR: a mixture-of-depths checkpoint (LlamaMoDForCausalLM, models/mixture_of_depths.h).
// IN (safetensors): "input_ids" i32 [B, T] (labels = the ids) and "calls" i32 [1]. Runs that many
// training forwards (CausalLM::loss, per-layer recompute when asked) each with its backward seeded
// with 1 / scored tokens (HF's mean), the gradients cleared between them, then one evaluation
// forward without gradients, and writes OUT: "loss.<i>" f64 [1] per training call,
// "grad.<i>.<name>" for every parameter (HF names), "eval_loss" f64 [1], the evaluation's token
// accuracy as the trainer counts it ("accuracy" i32 [right, scored]: the batch's rows, each whole,
// against IN's "labels" i32 [B, T] when it has them, else the ids)
// and "logits_row0" f32 [T, V]: CausalLM::logits_all of row 0 alone (what `unillm eval ppl` scores).
#include <cstdio>
#include <string>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "models/causal_lm.h"
#include "train/trainer_run.h"
#include "support/expect.h"

namespace {

using namespace unillm;

Tensor f64(double v) {
  Tensor t = Tensor::empty({1}, DType::f64);
  t.data<double>()[0] = v;
  return t;
}

int run(const std::string& model_dir, const std::string& in_path, const std::string& out_path, bool recompute) {
  auto model = models::load_causal_lm(model_dir);
  for (auto& p : model->module().parameters()) p.tensor->set_requires_grad(true);
  auto in = io::SafetensorsFile::open(in_path);
  models::TrainBatch tb;
  tb.input_ids = in->tensor("input_ids").clone();
  tb.labels = tb.input_ids.clone();
  const int64_t b = tb.input_ids.size(0), t = tb.input_ids.size(1);
  std::vector<int32_t> pos(static_cast<size_t>(b * t));
  for (int64_t r = 0; r < b; ++r)
    for (int64_t i = 0; i < t; ++i) pos[static_cast<size_t>(r * t + i)] = static_cast<int32_t>(i);
  tb.position_ids = Tensor::from_ints(pos, {b, t});
  const int calls = in->tensor("calls").contiguous().data<int32_t>()[0];
  io::NamedTensors result;
  for (int c = 0; c < calls; ++c) {
    for (auto& p : model->module().parameters()) p.tensor->autograd_meta().grad.reset();
    auto out = model->loss(tb, recompute);
    autograd::backward(out.loss_sum, Tensor::from_vector({1.0f / static_cast<float>(out.count)}, {}));
    result.push_back({"loss." + std::to_string(c), f64(out.loss_sum.item_flat(0) / static_cast<double>(out.count))});
    for (const auto& [name, g] : model->module().named_grads())
      result.push_back({"grad." + std::to_string(c) + "." + name, g.contiguous().clone()});
  }
  {
    autograd::NoGradGuard no_grad;
    auto out = model->loss(tb, false);
    result.push_back({"eval_loss", f64(out.loss_sum.item_flat(0) / static_cast<double>(out.count))});
    data::Batch batch;
    batch.rows = b;
    batch.seq_len = t;
    const Tensor ids = tb.input_ids.contiguous();
    batch.input_ids.assign(ids.data<int32_t>(), ids.data<int32_t>() + b * t);
    batch.labels = batch.input_ids;
    if (in->has("labels")) {
      const Tensor l = in->tensor("labels").contiguous();
      batch.labels.assign(l.data<int32_t>(), l.data<int32_t>() + b * t);
    }
    batch.lengths.assign(static_cast<size_t>(b), static_cast<int32_t>(t));
    const auto [right, scored] = train::detail::token_accuracy_counts(*model, batch);
    result.push_back({"accuracy", Tensor::from_ints({static_cast<int32_t>(right), static_cast<int32_t>(scored)}, {2})});
    result.push_back({"logits_row0", model->logits_all(std::vector<int32_t>(batch.input_ids.begin(),
                                                                            batch.input_ids.begin() + t))});
  }
  io::save_safetensors(out_path, result);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 5 && std::string(argv[4]) == "recompute")) {
    std::fprintf(stderr, "usage: mod_dump MODEL_DIR IN OUT [recompute]\n");
    return 2;
  }
  try {
    unillm::testing::init_cpu();
    return run(argv[1], argv[2], argv[3], argc == 5);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mod_dump: %s\n", e.what());
    return 1;
  }
}
