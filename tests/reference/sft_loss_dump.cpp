// The unillm half of sft_loss_check.py (run by it, not by ctest directly):
//   sft_loss_dump dft|eaft|asft IN OUT
// IN (safetensors): "x" [B·T, C] (f32 or f64: the final hidden states), "w" [V, C] (the lm_head,
// x's dtype), "labels" i32 [B, T] (unshifted, HF style: −100 = not scored), "alpha" f64 [1]
// (eaft_alpha / asft_alpha) and for asft the reference's "x_ref" and "w_ref". Runs
// ops::weighted_cross_entropy (dft, eaft) or ops::asft_cross_entropy on
// models::shifted_labels(labels) as the SFT stage does, then backward with d(loss_sum) = 1 /
// scored tokens (the trainer's num_items_in_batch normalisation), and writes OUT: "loss" f64 [1]
// (loss_sum / scored tokens), "weight" f64 [B·T] (dft, eaft), "dx" and "dw".
#include <cstdio>
#include <string>

#include "autograd/engine.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "models/causal_lm.h"
#include "ops/asft_cross_entropy.h"
#include "ops/weighted_cross_entropy.h"
#include "support/expect.h"

namespace {

using namespace unillm;

int run(const std::string& kind, const std::string& in_path, const std::string& out_path) {
  auto in = io::SafetensorsFile::open(in_path);
  Tensor x = in->tensor("x").clone(), w = in->tensor("w").clone();
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  const double alpha = in->tensor("alpha").to(DType::f64).data<double>()[0];
  const Tensor labels = models::shifted_labels(in->tensor("labels"));
  Tensor loss_sum, weight;
  int64_t count = 0;
  if (kind == "asft") {
    const int64_t items = ops::asft_cross_entropy(x.detach(), w.detach(), in->tensor("x_ref"),
                                                  in->tensor("w_ref"), labels, {alpha, 1.0, 0})
                              .count;
    // The gradients computed for the d(loss_sum) backward brings, as the trainer does.
    auto r = ops::asft_cross_entropy(x, w, in->tensor("x_ref"), in->tensor("w_ref"), labels,
                                     {alpha, 1.0 / static_cast<double>(items), 0});
    loss_sum = r.loss_sum;
    count = r.count;
  } else {
    ops::TokenWeighting how;
    if (kind == "eaft")
      how.kind = ops::TokenWeighting::Kind::kEaft;
    else if (kind != "dft")
      throw std::runtime_error("kind must be dft, eaft or asft, not " + kind);
    how.alpha = alpha;
    auto r = ops::weighted_cross_entropy(x, w, labels, how);
    loss_sum = r.loss_sum;
    count = r.count;
    weight = Tensor::empty({static_cast<int64_t>(r.weight.size())}, DType::f64);
    std::copy(r.weight.begin(), r.weight.end(), weight.data<double>());
  }
  const double items = static_cast<double>(count);
  Tensor seed = Tensor::empty({}, x.dtype());
  seed.fill(1.0 / items);
  autograd::backward(loss_sum, seed);
  Tensor loss = Tensor::empty({1}, DType::f64);
  loss.data<double>()[0] = loss_sum.item_flat(0) / items;
  io::NamedTensors out = {{"loss", loss}, {"dx", x.grad().clone()}, {"dw", w.grad().clone()}};
  if (weight.defined()) out.push_back({"weight", weight});
  io::save_safetensors(out_path, out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: sft_loss_dump dft|eaft IN OUT\n");
    return 2;
  }
  try {
    unillm::testing::init_cpu();
    return run(argv[1], argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sft_loss_dump: %s\n", e.what());
    return 1;
  }
}
