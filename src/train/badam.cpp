// BAdam's layer mode over the flat arena (see badam.h).
#include "train/badam.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"
#include "ops/optimizer.h"

namespace unillm::train {

namespace {

// LLaMA-Factory hands BlockOptimizer a torch AdamW built from HF's optim kwargs (lr, betas, eps:
// no weight_decay), and BlockOptimizer builds each layer's groups as {"weight_decay": ...,
// **defaults}: the defaults' weight_decay, torch's 0.01, wins for every tensor of the layer.
constexpr double kTorchAdamWDefaultDecay = 0.01;

// meta_'s layout: active block, AdamW steps since the switch, queue length, RNG (4 words), queue.
constexpr int64_t kActive = 0, kInner = 1, kQueueLen = 2, kRng = 3, kQueue = 7;

}  // namespace

std::string layer_prefix(const std::string& n) {
  for (size_t pos = n.rfind("layers."); pos != std::string::npos;
       pos = pos == 0 ? std::string::npos : n.rfind("layers.", pos - 1)) {
    if (pos > 0 && n[pos - 1] != '.') continue;
    size_t j = pos + 7;
    while (j < n.size() && std::isdigit(static_cast<unsigned char>(n[j]))) ++j;
    if (j > pos + 7 && j < n.size() && n[j] == '.') return n.substr(0, j + 1);
  }
  return "";
}

BAdam::BAdam(ParamArena& arena, const OptimizerConfig& c) : Optimizer(arena), c_(c) {
  std::map<std::string, int64_t> index;
  for (const auto& seg : arena.segments()) {
    const std::string p = layer_prefix(seg.name);
    int64_t b = -1;
    if (!p.empty()) {
      auto it = index.find(p);
      if (it == index.end()) {
        it = index.emplace(p, static_cast<int64_t>(prefixes_.size())).first;
        prefixes_.push_back(p);
        block_segs_.emplace_back();
      }
      b = it->second;
      block_segs_[static_cast<size_t>(b)].push_back(seg_block_.size());
    }
    seg_block_.push_back(b);
  }
  const int64_t n = num_blocks();
  if (n == 0)
    UNILLM_THROW(ConfigError,
                 "[badam] no trainable parameter lies in a decoder layer (model.layers.N.): "
                 "use_badam trains one layer at a time");
  if (c.badam.start_block >= n)
    UNILLM_THROW(ConfigError, "[badam] badam_start_block ", c.badam.start_block,
                 " is out of range: the model has ", n, " layers (0..", n - 1, ")");
  int64_t largest = 0;
  for (const auto& segs : block_segs_) {
    int64_t numel = 0;
    for (size_t s : segs) numel += arena.segments()[s].numel;
    largest = std::max(largest, numel);
  }
  const Device device = arena.param_tensor().device();
  m_ = Tensor::zeros({largest}, DType::f32, device);
  v_ = Tensor::zeros({largest}, DType::f32, device);
  meta_ = Tensor::zeros({kQueue + n}, DType::i64);
  Rng rng(c.badam.seed);
  auto st = rng.state();
  std::memcpy(&meta(kRng), st.data(), sizeof st);
  const std::string& mode = c.badam.switch_mode;
  if (c.badam.start_block >= 0)
    meta(kActive) = c.badam.start_block;
  else if (mode == "descending")
    meta(kActive) = n - 1;
  else if (mode == "random")
    switch_block();  // the first draw of the first permutation (the queue starts empty)
  else if (mode == "ascending")
    meta(kActive) = 0;
  else
    UNILLM_THROW(ConfigError, "[badam] switch mode '", mode, "' needs a start block");
}

int64_t BAdam::active_block() const { return meta_.data<int64_t>()[kActive]; }

// BlockOptimizer._update_active_block_idx, then the reset of switch_trainable_params.
void BAdam::switch_block() {
  const int64_t n = num_blocks();
  const std::string& mode = c_.badam.switch_mode;
  if (mode == "ascending") {
    meta(kActive) = (meta(kActive) + 1) % n;
  } else if (mode == "descending") {
    meta(kActive) = (meta(kActive) - 1 + n) % n;
  } else if (mode == "random") {
    // A new permutation when the last is used up, drawn from the back (as list.pop()); the
    // seeded RNG stands in for torch.randperm and is checkpointed with the queue.
    if (meta(kQueueLen) == 0) {
      std::array<uint64_t, 4> st;
      std::memcpy(st.data(), &meta(kRng), sizeof st);
      Rng rng;
      rng.set_state(st);
      int64_t* q = &meta(kQueue);
      for (int64_t i = 0; i < n; ++i) q[i] = i;
      for (int64_t i = n - 1; i > 0; --i)
        std::swap(q[i], q[rng.next_u64() % static_cast<uint64_t>(i + 1)]);
      st = rng.state();
      std::memcpy(&meta(kRng), st.data(), sizeof st);
      meta(kQueueLen) = n;
    }
    meta(kActive) = meta(kQueue + --meta(kQueueLen));
  }  // fixed: the same block, its state reset all the same
  meta(kInner) = 0;
  m_.fill(0.0);
  v_.fill(0.0);
}

void BAdam::step(double lr) {
  ++step_;
  const int64_t t = ++meta(kInner);  // torch's per-parameter step restarts with the new state
  const double bc1 = 1.0 - std::pow(c_.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(c_.beta2, static_cast<double>(t));
  ops::AdamWScalars s;
  s.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  s.beta1 = static_cast<float>(c_.beta1);
  s.beta2 = static_cast<float>(c_.beta2);
  s.eps = static_cast<float>(c_.eps);
  const Tensor& p = arena_.param_tensor();
  const Tensor& g = arena_.grad_tensor();
  int64_t local = 0;  // the layer's tensors lie one after another in m_ / v_
  for (size_t i : block_segs_[static_cast<size_t>(active_block())]) {
    const ArenaSegment& seg = arena_.segments()[i];
    const double seg_lr = lr * seg.lr_scale;
    s.step_size = static_cast<float>(seg_lr / bc1);
    s.decay = static_cast<float>(1.0 - seg_lr * kTorchAdamWDefaultDecay);
    const int64_t b = seg.offset, e = seg.offset + seg.numel;
    ops::adamw_update(p.slice(0, b, e), g.slice(0, b, e), m_.slice(0, local, local + seg.numel),
                      v_.slice(0, local, local + seg.numel), s);
    local += seg.numel;
  }
  // BlockOptimizer.step: after its global_step += 1, a switch when (global_step + 1) % every == 0
  // (so the first layer gets every − 1 steps). -1 never switches (LLaMA-Factory's meaning; the
  // package itself would switch at every step, as x % -1 == 0 in Python).
  const int64_t every = c_.badam.switch_interval;
  if (every > 0 && (step_ + 1) % every == 0) {
    switch_block();
    apply_trainable();
    describe_active();
  }
}

void BAdam::attach(const std::vector<nn::Module*>& modules,
                   const std::function<void(const std::string&)>& say) {
  say_ = say;
  std::map<std::string, Tensor*> by_name;
  for (nn::Module* m : modules)
    for (auto& r : m->parameters()) by_name.emplace(r.hf_names.at(0), r.tensor);
  handles_.clear();
  for (const auto& seg : arena_.segments()) {
    auto it = by_name.find(seg.name);
    UNILLM_CHECK(it != by_name.end(), "[badam] arena segment ", seg.name,
                 " is no parameter of the model");
    handles_.push_back(*it->second);  // a handle: shares the parameter's autograd state
  }
  apply_trainable();
  if (say_) {
    say_(UNILLM_MSG("BAdam (layer mode): ", num_blocks(), " layers, switch mode ",
                    c_.badam.switch_mode,
                    c_.badam.switch_interval > 0
                        ? ", every " + std::to_string(c_.badam.switch_interval) + " steps"
                        : std::string(", never switching"),
                    "; embeddings, final norm and lm_head stay as loaded"));
    describe_active();
  }
}

void BAdam::apply_trainable() {
  const int64_t active = active_block();
  for (size_t i = 0; i < handles_.size(); ++i)
    handles_[i].set_requires_grad(seg_block_[i] == active);
}

// badam_verbose as LLaMA-Factory documents it: 1 names the active layer at each switch, 2 also
// its tensors.
void BAdam::describe_active() const {
  if (!say_ || c_.badam.verbose < 1) return;
  const int64_t b = active_block();
  say_(UNILLM_MSG("BAdam: from step ", step_ + 1, " the parameters with the prefix ",
                  block_prefix(b), " train"));
  if (c_.badam.verbose < 2) return;
  for (size_t i : block_segs_[static_cast<size_t>(b)]) say_("  " + arena_.segments()[i].name);
}

}  // namespace unillm::train
