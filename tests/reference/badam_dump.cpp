// The unillm half of badam_check.py (run by it, not by ctest directly):
//   badam_dump MODE INTERVAL START IN OUT
// IN (safetensors): "param.<name>" (f32; arena order = by name), "grad.<step>.<name>" for steps
// 0..S−1, "lr" (f32 [S]) and "max_norm" (f32 [1]). Runs S trainer steps of BAdam (MODE
// ascending | descending | fixed, every INTERVAL steps, START −1 for the mode's default): the
// gradient of a tensor reaches the arena only while it requires grad (as backward would), then
// clip_grad_norm and step. Writes OUT: "param.<name>" (final weights), "active" (i64 [S]: the
// block of each step), "norm" (f64 [S]: each step's gradient norm before clipping).
#include <algorithm>
#include <cstdio>
#include <string>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "dump_params.h"
#include "support/expect.h"
#include "train/adamw.h"
#include "train/badam.h"

namespace {

using namespace unillm;

using Params = unillm::testing::DumpParams;

int run(char** argv) {
  auto in = io::SafetensorsFile::open(argv[4]);
  Params model;
  std::vector<std::string> names;
  for (const auto& t : in->tensors())
    if (t.name.rfind("param.", 0) == 0) names.push_back(t.name.substr(6));
  std::sort(names.begin(), names.end());
  for (const auto& n : names) model.add(n, in->tensor("param." + n));
  train::ParamArena arena(model);
  train::OptimizerConfig c;
  c.kind = "badam";
  c.weight_decay = 0.5;  // LLaMA-Factory's decay group; BAdam's groups override it
  c.badam.switch_mode = argv[1];
  c.badam.switch_interval = std::stoll(argv[2]);
  c.badam.start_block = std::stoll(argv[3]);
  train::BAdam opt(arena, c);
  opt.attach({&model}, nullptr);
  const Tensor lrs = in->tensor("lr");
  const double max_norm = in->tensor("max_norm").data<float>()[0];
  const int64_t steps = lrs.numel();
  Tensor active = Tensor::zeros({steps}, DType::i64), norms = Tensor::zeros({steps}, DType::f64);
  for (int64_t s = 0; s < steps; ++s) {
    active.data<int64_t>()[s] = opt.active_block();
    for (size_t k = 0; k < names.size(); ++k) {
      if (!model.tensors_[k].requires_grad()) continue;
      const auto& seg = arena.segments()[k];
      Tensor g = in->tensor("grad." + std::to_string(s) + "." + names[k]);
      std::copy(g.data<float>(), g.data<float>() + seg.numel, arena.grads() + seg.offset);
    }
    norms.data<double>()[s] = train::clip_grad_norm(arena, max_norm);
    opt.step(lrs.data<float>()[s]);
    arena.zero_grads();
  }
  io::NamedTensors out;
  for (size_t k = 0; k < names.size(); ++k) {
    const auto& seg = arena.segments()[k];
    out.push_back({"param." + names[k],
                   arena.param_tensor().slice(0, seg.offset, seg.offset + seg.numel).clone()});
  }
  out.push_back({"active", active});
  out.push_back({"norm", norms});
  io::save_safetensors(argv[5], out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: badam_dump ascending|descending|fixed INTERVAL START IN OUT\n");
    return 2;
  }
  try {
    unillm::testing::init_cpu();
    return run(argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "badam_dump: %s\n", e.what());
    return 1;
  }
}
