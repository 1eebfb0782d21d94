// The unillm half of optim_check.py (run by it, not by ctest directly):
//   optim_dump KIND IN OUT
// IN (safetensors): "param.<name>" (f32, 1-D or 2-D; names as HF, so "bias"/"norm" ones get no
// weight decay), "grad.<step>.<name>" for steps 0..S−1, and "lr" (f32 [S]: each step's lr) and
// "weight_decay" (f32 [1]). Runs S steps of optimizer KIND (adamw | sgd | adafactor |
// adamw_8bit; betas 0.9/0.999, eps 1e-8) over an arena of those parameters (sorted by name) and
// writes OUT:
// "param.<name>" (final weights), the optimizer's state tensors as it checkpoints them, and for
// adamw_8bit "deq.exp_avg.<name>" / "deq.exp_avg_sq.<name>" (the dequantised moments) and
// "map.signed" / "map.unsigned" (its dynamic maps).
#include <algorithm>
#include <cstdio>
#include <string>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "dump_params.h"
#include "support/expect.h"
#include "train/adamw_8bit.h"
#include "train/optimizer.h"

namespace {

using namespace unillm;

using Params = unillm::testing::DumpParams;

Tensor vec(const std::vector<float>& v) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
}

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
  const float wd = in->tensor("weight_decay").data<float>()[0];
  auto opt = train::make_optimizer(arena, {kind, 0.9, 0.999, 1e-8, wd});
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
  if (auto* q = dynamic_cast<train::AdamW8bit*>(opt.get())) {
    const std::vector<float> m = q->dequantized_exp_avg(), v = q->dequantized_exp_avg_sq();
    for (size_t k = 0; k < names.size(); ++k) {
      const auto& seg = arena.segments()[k];
      out.push_back({"deq.exp_avg." + names[k],
                     vec({m.begin() + seg.offset, m.begin() + seg.offset + seg.numel})});
      out.push_back({"deq.exp_avg_sq." + names[k],
                     vec({v.begin() + seg.offset, v.begin() + seg.offset + seg.numel})});
    }
    std::vector<float> s(train::bnb_dynamic_map(true).begin(), train::bnb_dynamic_map(true).end());
    std::vector<float> u(train::bnb_dynamic_map(false).begin(),
                         train::bnb_dynamic_map(false).end());
    out.push_back({"map.signed", vec(s)});
    out.push_back({"map.unsigned", vec(u)});
  }
  io::save_safetensors(out_path, out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: optim_dump adamw|sgd|adafactor|adamw_8bit IN OUT\n");
    return 2;
  }
  try {
    unillm::testing::init_cpu();
    return run(argv[1], argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optim_dump: %s\n", e.what());
    return 1;
  }
}
