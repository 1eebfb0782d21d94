// The unillm half of low_rank_check.py (run by it, not by ctest directly):
//   low_rank_dump galore|apollo IN OUT [key=value ...]
// keys: rank, update_interval, scale, proj_type, proj (random|svd), scale_type, scale_front (0|1),
// target (one substring; default all), eps (Adam's; default 1e-8).
// IN (safetensors): "param.<name>" (f32, HF names: "bias"/"norm" ones get no weight decay),
// "grad.<step>.<name>" for steps 0..S−1, "lr" (f32 [S]) and "weight_decay" (f32 [1]). Runs S steps
// of GaLore / APOLLO (betas 0.9/0.999) over an arena of those parameters (sorted by
// name) and writes OUT: "param.<name>" (final weights), the optimizer's state tensors, and
// "basis.<step>.<name>.left|right" (each target's bases in use at that step).
#include <algorithm>
#include <cstdio>
#include <string>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "dump_params.h"
#include "support/expect.h"
#include "train/apollo.h"
#include "train/galore.h"

namespace {

using namespace unillm;

using Params = unillm::testing::DumpParams;

// The optimizer's settings from key=value arguments (eps: Adam's epsilon, default 1e-8).
train::OptimizerConfig settings(const std::string& kind, int argc, char** argv) {
  train::OptimizerConfig c;
  c.kind = kind;
  train::LowRankSettings s = kind == "apollo" ? train::apollo_defaults() : train::LowRankSettings{};
  s.use = true;
  for (int i = 4; i < argc; ++i) {
    const std::string kv = argv[i];
    const size_t eq = kv.find('=');
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "rank")
      s.rank = std::stoll(v);
    else if (k == "update_interval")
      s.update_interval = std::stoll(v);
    else if (k == "scale")
      s.scale = std::stod(v);
    else if (k == "proj_type")
      s.proj_type = v;
    else if (k == "proj")
      s.proj = v;
    else if (k == "scale_type")
      s.scale_type = v;
    else if (k == "scale_front")
      s.scale_front = v == "1";
    else if (k == "target")
      s.target = {v};
    else if (k == "eps")
      c.eps = std::stod(v);
    else
      throw std::runtime_error("unknown key " + k);
  }
  c.low_rank = s;
  return c;
}

// Each target's bases now, named by its HF name.
void add_bases(const train::LowRankLayout& l, train::Optimizer& opt, int64_t step,
               const std::vector<std::string>& names, io::NamedTensors& out) {
  Tensor* left = nullptr;
  Tensor* right = nullptr;
  for (auto& [name, t] : opt.state()) {
    if (name == "proj_left") left = t;
    if (name == "proj_right") right = t;
  }
  for (const auto& s : l.slots) {
    if (!s.target) continue;
    const std::string base = "basis." + std::to_string(step) + "." + names[s.part_index];
    if (s.shape.left_size() > 0)
      out.push_back(
          {base + ".left", left->slice(0, s.left_offset, s.left_offset + s.shape.left_size())
                               .clone()
                               .view({s.shape.rows, s.shape.r})});
    if (s.shape.right_size() > 0)
      out.push_back(
          {base + ".right", right->slice(0, s.right_offset, s.right_offset + s.shape.right_size())
                                .clone()
                                .view({s.shape.r, s.shape.cols})});
  }
}

int run(const std::string& in_path, const std::string& out_path, train::OptimizerConfig c) {
  const std::string kind = c.kind;
  auto in = io::SafetensorsFile::open(in_path);
  Params model;
  std::vector<std::string> names;
  for (const auto& t : in->tensors())
    if (t.name.rfind("param.", 0) == 0) names.push_back(t.name.substr(6));
  std::sort(names.begin(), names.end());  // the arena's order: by name
  for (const auto& n : names) model.add(n, in->tensor("param." + n));
  train::ParamArena arena(model);
  const Tensor lrs = in->tensor("lr");
  c.weight_decay = in->tensor("weight_decay").data<float>()[0];
  auto opt = train::make_optimizer(arena, c);
  const auto& layout = kind == "galore" ? dynamic_cast<train::Galore&>(*opt).layout()
                                        : dynamic_cast<train::Apollo&>(*opt).layout();
  io::NamedTensors out;
  for (int64_t st = 0; st < lrs.numel(); ++st) {
    for (size_t k = 0; k < names.size(); ++k) {
      const auto& seg = arena.segments()[k];
      Tensor g = in->tensor("grad." + std::to_string(st) + "." + names[k]);
      std::copy(g.data<float>(), g.data<float>() + seg.numel, arena.grads() + seg.offset);
    }
    opt->step(lrs.data<float>()[st]);
    add_bases(layout, *opt, st, names, out);
  }
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
  if (argc < 4) {
    std::fprintf(stderr, "usage: low_rank_dump galore|apollo IN OUT [key=value ...]\n");
    return 2;
  }
  try {
    unillm::testing::init_cpu();
    return run(argv[2], argv[3], settings(argv[1], argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "low_rank_dump: %s\n", e.what());
    return 1;
  }
}
