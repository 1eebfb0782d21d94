// The unillm half of badam_ratio_check.py (run by it, not by ctest directly):
//   badam_ratio_dump MASK_MODE RATIO EVERY PASSES SEED MAX_NORM IN OUT
// IN (safetensors): "param.<k>.<name>" (f32; arena order = by key, k zero-padded: HF order less
// the embeddings and lm_head), "grad.<step>.<k>.<name>" for steps 0..S−1 and "lr" (f64 [S]).
// Runs S steps of BAdam's ratio mode (PASSES backward passes per step; the gradients given are
// their sums): gradients into the arena, prepare_grads, clip_grad_norm, step. Writes OUT:
// "param.<k>.<name>" (final weights), "norm" (f64 [S]: each step's gradient norm before clipping)
// and "seed" (i64: each tensor's seed).
#include <algorithm>
#include <cstdio>
#include <string>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "dump_params.h"
#include "support/expect.h"
#include "train/adamw.h"
#include "train/badam_ratio.h"

namespace {

using namespace unillm;

using Params = unillm::testing::DumpParams;

int run(char** argv) {
  auto in = io::SafetensorsFile::open(argv[7]);
  std::vector<std::string> keys;  // "<k>.<name>"
  for (const auto& t : in->tensors())
    if (t.name.rfind("param.", 0) == 0) keys.push_back(t.name.substr(6));
  std::sort(keys.begin(), keys.end());
  Params model;
  for (const auto& k : keys) model.add(k.substr(k.find('.') + 1), in->tensor("param." + k));
  train::ParamArena arena(model);
  train::OptimizerConfig c;
  c.kind = "badam_ratio";
  c.badam.mask_mode = argv[1];
  c.badam.update_ratio = std::stod(argv[2]);
  c.badam.ratio_switch_every = std::stoll(argv[3]);
  c.badam.backward_passes = std::stoll(argv[4]);
  c.badam.seed = std::stoull(argv[5]);
  const double max_norm = std::stod(argv[6]);
  train::BAdamRatio opt(arena, c);
  const Tensor lrs = in->tensor("lr");
  const int64_t steps = lrs.numel();
  Tensor norms = Tensor::zeros({steps}, DType::f64);
  for (int64_t s = 0; s < steps; ++s) {
    for (size_t k = 0; k < keys.size(); ++k) {
      const auto& seg = arena.segments()[k];
      Tensor g = in->tensor("grad." + std::to_string(s) + "." + keys[k]);
      std::copy(g.data<float>(), g.data<float>() + seg.numel, arena.grads() + seg.offset);
    }
    opt.prepare_grads();
    norms.data<double>()[s] = train::clip_grad_norm(arena, max_norm);
    opt.step(lrs.data<double>()[s]);
    arena.zero_grads();
  }
  io::NamedTensors out;
  for (size_t k = 0; k < keys.size(); ++k) {
    const auto& seg = arena.segments()[k];
    out.push_back({"param." + keys[k],
                   arena.param_tensor().slice(0, seg.offset, seg.offset + seg.numel).clone()});
  }
  Tensor seeds = Tensor::zeros({static_cast<int64_t>(opt.num_parts())}, DType::i64);
  for (size_t i = 0; i < opt.num_parts(); ++i) seeds.data<int64_t>()[i] = opt.seed_of(i);
  out.push_back({"norm", norms});
  out.push_back({"seed", seeds});
  io::save_safetensors(argv[8], out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(
        stderr,
        "usage: badam_ratio_dump adjacent|scatter RATIO EVERY PASSES SEED MAX_NORM IN OUT\n");
    return 2;
  }
  try {
    unillm::testing::init_cpu();
    return run(argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "badam_ratio_dump: %s\n", e.what());
    return 1;
  }
}
