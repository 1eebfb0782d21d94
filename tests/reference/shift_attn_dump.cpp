// The unillm half of shift_attn_check.py (run by it, not by ctest directly):
//   shift_attn_dump MODEL_DIR IN OUT [recompute]
// IN (safetensors): "input_ids" and "labels" i32 [B, T] (unshifted, −100 = not scored), "lengths"
// i32 [B] (real tokens per row; the rest is padding) and "ratio" f64 [1] (S²-Attn's group ratio,
// 0 = full causal attention). Runs (with per-layer recompute when asked) the training forward CausalLM::loss with
// TrainBatch::shift_attn_ratio and backward with d(loss_sum) = 1 / scored tokens (HF's mean), and
// writes OUT: "loss" f64 [1] and "grad.<name>" for every parameter (HF names).
#include <cstdio>
#include <string>

#include "autograd/engine.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "models/causal_lm.h"
#include "support/expect.h"

namespace {

using namespace unillm;

int run(const std::string& model_dir, const std::string& in_path, const std::string& out_path, bool recompute) {
  auto model = models::load_causal_lm(model_dir);
  for (auto& p : model->module().parameters()) p.tensor->set_requires_grad(true);
  auto in = io::SafetensorsFile::open(in_path);
  models::TrainBatch tb;
  tb.input_ids = in->tensor("input_ids").clone();
  tb.labels = in->tensor("labels").clone();
  const int64_t b = tb.input_ids.size(0), t = tb.input_ids.size(1);
  std::vector<int32_t> pos(static_cast<size_t>(b * t));
  for (int64_t r = 0; r < b; ++r)
    for (int64_t i = 0; i < t; ++i) pos[static_cast<size_t>(r * t + i)] = static_cast<int32_t>(i);
  tb.position_ids = Tensor::from_ints(pos, {b, t});
  const Tensor lengths = in->tensor("lengths").contiguous();
  tb.row_lengths.assign(lengths.data<int32_t>(), lengths.data<int32_t>() + b);
  tb.shift_attn_ratio = in->tensor("ratio").to(DType::f64).data<double>()[0];
  auto out = model->loss(tb, recompute);
  autograd::backward(out.loss_sum, Tensor::from_vector({1.0f / static_cast<float>(out.count)}, {}));
  Tensor loss = Tensor::empty({1}, DType::f64);
  loss.data<double>()[0] = out.loss_sum.item_flat(0) / static_cast<double>(out.count);
  io::NamedTensors result = {{"loss", loss}};
  for (const auto& [name, g] : model->module().named_grads()) result.push_back({"grad." + name, g.contiguous()});
  io::save_safetensors(out_path, result);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 5 && std::string(argv[4]) == "recompute")) {
    std::fprintf(stderr, "usage: shift_attn_dump MODEL_DIR IN OUT [recompute]\n");
    return 2;
  }
  try {
    unillm::testing::init_cpu();
    return run(argv[1], argv[2], argv[3], argc == 5);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shift_attn_dump: %s\n", e.what());
    return 1;
  }
}
