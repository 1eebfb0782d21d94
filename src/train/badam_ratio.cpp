// BAdam's ratio mode over the flat arena (see badam_ratio.h). The package keeps a mask per
// parameter shape, made by the first parameter of that shape whose gradient backward finishes;
// its offset moves by the kept count every switch_every steps, so every mask is a function of
// (parameter, step) and only the Adam moments need saving.
#include "train/badam_ratio.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <tuple>

#include "core/error.h"

namespace unillm::train {

namespace {

// sparse_update_hook sparsifies a tensor under preserve_threshold elements with grad + 1e-9.
constexpr int64_t kPreserveThreshold = 100;
constexpr double kNudge = 1e-9;

// torch.randperm(n) on the CPU generator seeded with `seed` (torch 1.13 and 2.x): Fisher–Yates
// from the front, swapping i with i + random() % (n − i), random() the mt19937's 32-bit output.
std::vector<uint32_t> torch_randperm(int64_t n, int64_t seed) {
  std::mt19937 gen(static_cast<uint32_t>(seed));  // at::mt19937 is the standard one
  std::vector<uint32_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(gen()) % (n - i);
    std::swap(r[static_cast<size_t>(i)], r[static_cast<size_t>(z + i)]);
  }
  return r;
}

}  // namespace

std::vector<bool> badam_ratio_frozen(const std::vector<std::string>& names) {
  std::vector<bool> out(names.size(), false);
  for (const char* what : {"embed", "lm_head"})
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i].find(what) != std::string::npos) {
        out[i] = true;
        break;
      }
  return out;
}

BAdamRatio::BAdamRatio(ParamArena& arena, const OptimizerConfig& c)
    : Optimizer(arena), c_(c), parts_(arena_parts(arena)) {
  const double r = c.badam.update_ratio;
  if (!(r > 1e-6 && r <= 1.0))
    UNILLM_THROW(ConfigError, "[badam] badam_update_ratio ", r, " must lie in (1e-6, 1]");
  if (c.badam.ratio_switch_every <= 0)
    UNILLM_THROW(ConfigError, "[badam] ratio mode's switch interval must be positive, not ",
                 c.badam.ratio_switch_every);
  if (parts_.empty()) UNILLM_THROW(ConfigError, "[badam] ratio mode: nothing to train");
  UNILLM_CHECK(c.badam.backward_passes >= 1, "[badam] backward_passes must be >= 1");
  // LLaMA-Factory's seeds: one torch.randint(0, 1000) per model parameter in HF order, after
  // torch.manual_seed(seed) — the embedding (frozen, first) takes the first draw.
  std::mt19937 gen(static_cast<uint32_t>(c.badam.seed & 0xffffffffu));
  gen();
  for (size_t i = 0; i < parts_.size(); ++i) seeds_.push_back(static_cast<int64_t>(gen() % 1000));
  // Backward finishes the last layer first, so a shape's mask comes from its last part in HF
  // order (the final norm for the hidden-sized vectors, o_proj for [C, C], ...).
  auto shape = [this](size_t i) {
    return std::make_tuple(parts_[i].rows, parts_[i].cols, parts_[i].matrix);
  };
  std::map<std::tuple<int64_t, int64_t, bool>, size_t> last;
  for (size_t i = 0; i < parts_.size(); ++i) last[shape(i)] = i;
  int64_t total = 0;
  for (size_t i = 0; i < parts_.size(); ++i) {
    owner_.push_back(last.at(shape(i)));
    if (c.badam.mask_mode == "scatter" &&
        parts_[i].numel() > int64_t{std::numeric_limits<uint32_t>::max()})
      UNILLM_THROW(NotImplemented, "[badam] scatter masks over ", parts_[i].numel(), " elements (",
                   parts_[i].seg->name, "): at most 2^32 − 1");
    state_off_.push_back(total);
    total += kept(i);
  }
  m_ = Tensor::zeros({std::max<int64_t>(total, 1)}, DType::f32);
  v_ = Tensor::zeros({std::max<int64_t>(total, 1)}, DType::f32);
}

int64_t BAdamRatio::kept(size_t i) const {
  const int64_t n = parts_[i].numel();
  if (c_.badam.update_ratio == 1.0) return n;  // the package keeps every entry (grad + 1e-9)
  return static_cast<int64_t>(static_cast<double>(n) * c_.badam.update_ratio);  // Python's int()
}

// _generate_mask_{adjacent,scatter} after `moves` moves of the offset (each by the kept count,
// modulo numel), as ascending indices: the order coalesce() gives the package's Adam state.
std::vector<int64_t> BAdamRatio::make_mask(size_t part, int64_t moves) const {
  const int64_t n = parts_[part].numel(), k = kept(part);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(k));
  if (k == n) {
    for (int64_t j = 0; j < n; ++j) out.push_back(j);
    return out;
  }
  if (n == 0 || k == 0) return out;
  const auto off = static_cast<int64_t>(static_cast<unsigned __int128>(moves % n) *
                                        static_cast<uint64_t>(k) % static_cast<uint64_t>(n));
  // The kept positions: [off, off + k), wrapping to [0, off + k − n) past the end.
  auto each = [&](auto&& f) {
    for (int64_t j = off; j < std::min(off + k, n); ++j) f(j);
    for (int64_t j = 0; j < off + k - n; ++j) f(j);
  };
  if (c_.badam.mask_mode == "adjacent") {
    each([&](int64_t j) { out.push_back(j); });
  } else {
    const std::vector<uint32_t> perm = torch_randperm(n, seeds_[part]);
    each([&](int64_t j) { out.push_back(perm[static_cast<size_t>(j)]); });
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Between moves every part of a shape uses its owner's mask. In the step before a move each run
// of the hook moves a part's offset and clears the shape's mask after use, so every part but the
// owner (the first to run) makes a mask of its own, and with gradient accumulation each backward
// pass moves the offsets again: that step's gradient is cut by the last pass's own masks, and a
// round begins `backward_passes` moves further on.
const std::vector<int64_t>& BAdamRatio::mask_of(size_t part, int64_t step) {
  const int64_t every = c_.badam.ratio_switch_every, passes = c_.badam.backward_passes;
  const int64_t round = step / every;
  const bool moving = (step + 1) % every == 0;
  const size_t from = moving ? part : owner_[part];
  const int64_t moves = round * passes + (moving ? passes - 1 : 0);
  // A scatter mask costs a randperm of the whole tensor: each is made once per round (both
  // prepare_grads and step ask), and the round's masks are dropped when the next begins.
  if (round != cache_round_) {
    cache_.clear();
    cache_round_ = round;
  }
  auto it = cache_.find({from, moves});
  if (it == cache_.end())
    it = cache_.emplace(std::make_pair(from, moves), make_mask(from, moves)).first;
  return it->second;
}

void BAdamRatio::prepare_grads() {
  prepared_ = true;
  const bool cpu = arena_.grad_tensor().device().is_cpu();
  Tensor g = cpu ? arena_.grad_tensor() : arena_.grad_tensor().to(Device{});
  float* grads = g.data<float>();
  std::vector<float> keep;
  // + 1e-9 at each backward pass's hook (the kept entries keep every pass's share).
  const auto nudge_by = static_cast<float>(kNudge * static_cast<double>(c_.badam.backward_passes));
  for (size_t i = 0; i < parts_.size(); ++i) {
    float* p = grads + parts_[i].offset;
    const int64_t n = parts_[i].numel();
    const std::vector<int64_t>& mask = mask_of(i, steps());
    const bool nudge = n < kPreserveThreshold || kept(i) == n;
    keep.resize(mask.size());
    for (size_t k = 0; k < mask.size(); ++k) keep[k] = p[mask[k]] + (nudge ? nudge_by : 0.0f);
    std::fill(p, p + n, 0.0f);
    for (size_t k = 0; k < mask.size(); ++k) p[mask[k]] = keep[k];
  }
  if (!cpu) {
    Tensor dst = arena_.grad_tensor();  // a handle on the arena's storage
    dst.copy_from(g);
  }
}

// BlockOptimizerRatio._sparse_adam in the package's f32 operation order.
void BAdamRatio::step(double lr) {
  if (!prepared_) prepare_grads();
  prepared_ = false;
  const int64_t every = c_.badam.ratio_switch_every;
  const auto t = static_cast<double>(steps() % every + 1);  // the state restarts every `every`
  const double bc1 = 1.0 - std::pow(c_.beta1, t), bc2 = 1.0 - std::pow(c_.beta2, t);
  const float one_b1 = static_cast<float>(1.0 - c_.beta1),
              one_b2 = static_cast<float>(1.0 - c_.beta2);
  const float eps = static_cast<float>(c_.eps);
  HostArena host(arena_);
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  for (size_t i = 0; i < parts_.size(); ++i) {
    const float neg = static_cast<float>(-(lr * parts_[i].seg->lr_scale) * std::sqrt(bc2) / bc1);
    float* p = host.params() + parts_[i].offset;
    const float* g = host.grads() + parts_[i].offset;
    const std::vector<int64_t>& mask = mask_of(i, steps());
    float* mi = m + state_off_[i];
    float* vi = v + state_off_[i];
    for (size_t k = 0; k < mask.size(); ++k) {
      const float gk = g[mask[k]];
      mi[k] += (gk - mi[k]) * one_b1;
      vi[k] += (gk * gk - vi[k]) * one_b2;
      const float dir = mi[k] / (std::sqrt(vi[k]) + eps);
      p[mask[k]] += neg * dir;
    }
  }
  host.commit();
  ++step_;
  if (step_ % every == 0) {  // _reset_state_dict
    m_.fill(0.0);
    v_.fill(0.0);
  }
}

void BAdamRatio::attach(const std::vector<nn::Module*>& modules,
                        const std::function<void(const std::string&)>& say) {
  (void)modules;
  if (!say) return;
  int64_t total = 0, kept_total = 0;
  for (size_t i = 0; i < parts_.size(); ++i) {
    total += parts_[i].numel();
    kept_total += kept(i);
  }
  say(UNILLM_MSG("BAdam (ratio mode): ", kept_total, " of ", total, " elements update (",
                 c_.badam.mask_mode, " masks, badam_update_ratio ", c_.badam.update_ratio,
                 "), masks move and the Adam state restarts every ", c_.badam.ratio_switch_every,
                 " steps; no weight decay; embeddings and lm_head stay as loaded"));
}

}  // namespace unillm::train
