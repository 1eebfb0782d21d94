// Packing parameters and gradients into flat storage.
#include "train/arena.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>

namespace unillm::train {

bool decays(const std::string& n) {
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (has("bias") || has("layernorm") || has("rmsnorm") || has("_norm.") || has("_norm")) return false;
  // "(?:^|\.)norm(?:$|\.)": model.norm.weight
  if (n.rfind("norm.", 0) == 0 || has(".norm.") || (n.size() >= 5 && n.compare(n.size() - 5, 5, ".norm") == 0)) return false;
  return true;
}

namespace {

// Rows of each HF name of r (from the modules' named views); one part when they are not a row split.
std::vector<int64_t> part_rows(const nn::ParamRef& r, const std::map<std::string, int64_t>& rows_of) {
  const Tensor& p = *r.tensor;
  if (p.ndim() == 0) return {1};
  std::vector<int64_t> rows;
  int64_t sum = 0;
  for (const auto& n : r.hf_names) {
    auto it = rows_of.find(n);
    if (it == rows_of.end()) return {p.shape()[0]};
    rows.push_back(it->second);
    sum += it->second;
  }
  return sum == p.shape()[0] ? rows : std::vector<int64_t>{p.shape()[0]};
}

// HF name -> rows of its view, for the base weights and each adapter's.
void collect_rows(nn::Module& m, const std::vector<nn::ParamRef>& refs, std::map<std::string, int64_t>& out) {
  std::set<std::string> adapters;
  for (const auto& r : refs)
    if (!r.adapter.empty()) adapters.insert(r.adapter);
  auto add = [&](const nn::NamedTensors& named) {
    for (const auto& [name, t] : named) out[name] = t.ndim() == 0 ? 1 : t.shape()[0];
  };
  add(m.named_parameters());
  for (const auto& a : adapters) add(m.named_adapter_parameters(a));
}

}  // namespace

ParamArena::ParamArena(const std::vector<nn::Module*>& modules, bool with_grads, bool lazy) {
  std::vector<nn::ParamRef> refs;
  std::map<std::string, int64_t> rows_of;
  for (nn::Module* m : modules) {
    collect_rows(*m, m->parameters(), rows_of);
    for (auto& r : m->parameters()) {
      if (!r.tensor->requires_grad()) continue;
      UNILLM_CHECK(r.tensor->dtype() == DType::f32 || r.tensor->dtype() == DType::bf16 || r.tensor->dtype() == DType::f16,
                   "[train] trainable parameter ", r.hf_names.at(0), " is ", dtype_name(r.tensor->dtype()),
                   "; training needs f32, bf16 or f16 parameters");
      refs.push_back(r);
      numel_ += r.tensor->numel();
    }
  }
  // On the parameters' device (the model's): the optimizer and clipping run there.
  const Device device = refs.empty() ? Device{} : refs.front().tensor->device();
  params_ = lazy ? Tensor(std::make_shared<Storage>(nullptr, static_cast<size_t>(numel_) * 4, device, nullptr), {numel_}, DType::f32)
               : Tensor::empty({numel_}, DType::f32, device);
  if (with_grads) grads_ = Tensor::zeros({numel_}, DType::f32, device);
  int64_t off = 0;
  for (auto& r : refs) {
    Tensor& p = *r.tensor;
    const int64_t n = p.numel();
    Tensor dst = params_.slice(0, off, off + n).view(p.shape());
    if (!lazy)
      dst.copy_from(p);  // a bf16/f16 parameter is upcast: the arena is its f32 master copy
    else if (p.storage()->holds_memory())
      initial_.push_back({off, p.to(DType::f32)});
    Tensor packed = dst;
    packed.set_requires_grad(true);
    if (with_grads) packed.set_grad(grads_.slice(0, off, off + n).view(p.shape()));
    p = packed;  // the module now reads its parameter from the arena
    ArenaSegment seg;
    seg.name = r.hf_names.at(0);
    seg.offset = off;
    seg.numel = n;
    seg.decay = decays(seg.name);
    seg.shape.assign(p.shape().begin(), p.shape().end());
    seg.part_rows = part_rows(r, rows_of);
    seg.part_names = seg.part_rows.size() == r.hf_names.size() ? r.hf_names
                                                                : std::vector<std::string>{seg.name};
    segments_.push_back(std::move(seg));
    off += n;
  }
}

ParamArena ParamArena::range(int64_t lo, int64_t hi) const {
  UNILLM_CHECK(0 <= lo && lo <= hi && hi <= numel_, "[train] arena range [", lo, ", ", hi, ") outside [0, ", numel_, ")");
  ParamArena r;
  r.numel_ = hi - lo;
  r.params_ = params_.slice(0, lo, hi);
  if (grads_.defined()) r.grads_ = grads_.slice(0, lo, hi);
  for (const auto& seg : segments_) {
    const int64_t b = std::max(seg.offset, lo), e = std::min(seg.offset + seg.numel, hi);
    if (b >= e) continue;
    ArenaSegment s = seg;
    s.offset = b - lo;
    s.numel = e - b;
    if (s.numel != seg.numel) {  // cut: no longer the tensor HF has
      s.shape = {s.numel};
      s.part_rows.clear();
    }
    r.segments_.push_back(std::move(s));
  }
  return r;
}

ParamArena ParamArena::copy_runs(const std::vector<ArenaRun>& runs, int64_t numel) const {
  ParamArena r;
  r.numel_ = numel;
  r.params_ = Tensor::zeros({numel}, DType::f32, params_.device());
  r.grads_ = Tensor::zeros({numel}, DType::f32, params_.device());
  for (const ArenaRun& run : runs) {
    UNILLM_CHECK(0 <= run.lo && run.lo <= run.hi && run.hi <= numel_ && run.at >= 0 && run.at + run.hi - run.lo <= numel,
                 "[train] arena run [", run.lo, ", ", run.hi, ") at ", run.at, " outside the arenas");
    if (run.hi == run.lo) continue;
    if (params_.storage()->holds_memory())  // a lazy arena's values reach the shard as they load
      r.params_.slice(0, run.at, run.at + run.hi - run.lo).copy_from(params_.slice(0, run.lo, run.hi));
    ParamArena part = range(run.lo, run.hi);
    for (ArenaSegment& seg : part.segments_) {
      seg.offset += run.at;
      r.segments_.push_back(std::move(seg));
    }
  }
  std::sort(r.segments_.begin(), r.segments_.end(),
            [](const ArenaSegment& a, const ArenaSegment& b) { return a.offset < b.offset; });
  return r;
}

void ParamArena::release_storage() {
  for (Tensor* t : {&params_, &grads_})
    if (t->defined()) t->storage()->release();
}

void ParamArena::zero_grads() {
  if (!grads_.defined() || !grads_.storage()->holds_memory()) return;  // ZeRO-3 zeroes its shard
  if (grads_.device().is_cpu())
    std::memset(grads_.raw_data(), 0, grads_.nbytes());
  else
    grads_.fill(0.0);  // the device's memset
}

bool ParamArena::all_finite() const {
  // On a device the weights come to the host: this runs before a save, which copies them anyway.
  const Tensor host = params_.device().is_cpu() ? params_ : params_.to(Device{});
  return all_finite_f32(host.data<float>(), static_cast<size_t>(numel_));
}

std::vector<ArenaRun> clip_runs(const std::vector<ArenaRun>& runs, int64_t lo, int64_t hi) {
  std::vector<ArenaRun> out;
  for (const ArenaRun& r : runs) {
    const int64_t b = std::max(lo, r.lo), e = std::min(hi, r.hi);
    if (b < e) out.push_back({b, e, r.at + (b - r.lo)});
  }
  return out;
}

}  // namespace unillm::train
