// The unillm half of muon_adam_mini_check.py (run by it, not by ctest directly):
//   muon_adam_mini_dump muon|adam_mini IN OUT
// IN (safetensors): "param.<HF name>" (f32, 1-D or 2-D), "grad.<step>.<HF name>" for steps
// 0..S−1, "lr" (f32 [S]: each step's lr), "hparams" (f32 [7]: weight_decay, beta1, beta2, eps,
// hidden_size, num_attention_heads, num_key_value_heads). Runs S steps of the optimiser over an
// arena of those parameters (sorted by name) and writes OUT: "param.<name>" (final weights) and
// the optimiser's state tensors as it checkpoints them.
#include <algorithm>
#include <cstdio>
#include <string>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "dump_params.h"
#include "support/expect.h"
#include "train/optimizer.h"

namespace {

using namespace unillm;

using Params = unillm::testing::DumpParams;

int run(const std::string& kind, const std::string& in_path, const std::string& out_path) {
  auto in = io::SafetensorsFile::open(in_path);
  Params model;
  std::vector<std::string> names;
  for (const auto& t : in->tensors())
    if (t.name.rfind("param.", 0) == 0) names.push_back(t.name.substr(6));
  std::sort(names.begin(), names.end());  // the arena's order: by name
  for (const auto& n : names) model.add(n, in->tensor("param." + n));
  train::ParamArena arena(model);
  const Tensor lrs = in->tensor("lr");
  const float* h = in->tensor("hparams").data<float>();
  train::OptimizerConfig c;
  c.kind = kind;
  c.beta1 = h[1], c.beta2 = h[2], c.eps = h[3], c.weight_decay = h[0];
  c.hidden_size = static_cast<int64_t>(h[4]);
  c.num_heads = static_cast<int64_t>(h[5]);
  c.num_kv_heads = static_cast<int64_t>(h[6]);
  auto opt = train::make_optimizer(arena, c);
  for (int64_t s = 0; s < lrs.numel(); ++s) {
    for (size_t k = 0; k < names.size(); ++k) {
      const auto& seg = arena.segments()[k];
      Tensor g = in->tensor("grad." + std::to_string(s) + "." + names[k]);
      std::copy(g.data<float>(), g.data<float>() + seg.numel, arena.grads() + seg.offset);
    }
    opt->step(lrs.data<float>()[s]);
  }
  io::NamedTensors out;
  for (size_t k = 0; k < names.size(); ++k) {
    const auto& seg = arena.segments()[k];
    out.push_back({"param." + names[k],
                   arena.param_tensor().slice(0, seg.offset, seg.offset + seg.numel).clone()});
  }
  for (const auto& named : opt->state()) out.push_back({named.first, named.second->clone()});
  io::save_safetensors(out_path, out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: muon_adam_mini_dump muon|adam_mini IN OUT\n");
    return 2;
  }
  try {
    unillm::testing::init_cpu();
    return run(argv[1], argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "muon_adam_mini_dump: %s\n", e.what());
    return 1;
  }
}
