// The optimiser factory, the arena's HF-named parts, host copies for host-side loops, and
// LoRA+'s per-segment learning rates.
#include "train/optimizer.h"

#include "core/error.h"
#include "io/safetensors_writer.h"
#include "train/adafactor.h"
#include "train/adamw.h"
#include "train/adam_mini.h"
#include "train/adamw_8bit.h"
#include "train/apollo.h"
#include "train/galore.h"
#include "train/muon.h"
#include "train/badam.h"
#include "train/badam_ratio.h"
#include "train/sgd.h"

namespace unillm::train {

void Optimizer::write_state(const std::string& path) {
  io::NamedTensors tensors;
  for (const auto& named : state()) tensors.push_back({named.first, *named.second});
  io::save_safetensors(path, tensors);
}

void Optimizer::read_state(const io::SafetensorsFile& f, const std::string& where) {
  for (const auto& [name, dst] : state()) {
    if (!f.has(name)) UNILLM_THROW(IoError, "[checkpoint] ", where, ": '", name, "' missing");
    Tensor t = f.tensor(name);
    if (t.shape() != dst->shape() || t.dtype() != dst->dtype())
      UNILLM_THROW(IoError, "[checkpoint] ", where, ": '", name, "' is ", dtype_name(t.dtype()), " ",
                   shape_str(t.shape()), ", expected ", dtype_name(dst->dtype()), " ", shape_str(dst->shape()));
    dst->copy_from(t);
  }
}

int64_t Optimizer::state_bytes() {
  int64_t n = 0;
  for (const auto& named : state()) n += static_cast<int64_t>(named.second->nbytes());
  return n;
}

std::vector<ArenaPart> arena_parts(const ParamArena& arena) {
  std::vector<ArenaPart> out;
  for (const auto& seg : arena.segments()) {
    const bool matrix = seg.shape.size() == 2;
    const int64_t cols = matrix ? seg.shape[1] : 1;
    int64_t off = seg.offset;
    for (int64_t rows : seg.part_rows) {
      out.push_back({off, rows, cols, matrix, &seg});
      off += rows * cols;
    }
    UNILLM_CHECK(off == seg.offset + seg.numel, "[optim] parts of ", seg.name, " cover ",
                 off - seg.offset, " of ", seg.numel, " elements");
  }
  return out;
}

HostArena::HostArena(ParamArena& arena) : arena_(arena) {
  const bool cpu = arena.param_tensor().device().is_cpu();
  p_ = cpu ? arena.param_tensor() : arena.param_tensor().to(Device{});
  g_ = cpu ? arena.grad_tensor() : arena.grad_tensor().to(Device{});
}

void HostArena::commit() {
  if (arena_.param_tensor().device().is_cpu()) return;
  Tensor dst = arena_.param_tensor();  // a handle on the arena's storage
  dst.copy_from(p_);
}

std::unique_ptr<Optimizer> make_optimizer(ParamArena& arena, const OptimizerConfig& c) {
  if (c.kind == "adamw")
    return std::make_unique<AdamW>(arena, AdamWConfig{c.beta1, c.beta2, c.eps, c.weight_decay});
  if (c.kind == "badam") return std::make_unique<BAdam>(arena, c);
  if (c.kind == "badam_ratio") return std::make_unique<BAdamRatio>(arena, c);
  if (c.kind == "sgd") return std::make_unique<Sgd>(arena, c.weight_decay);
  if (c.kind == "galore") return std::make_unique<Galore>(arena, c);
  if (c.kind == "apollo") return std::make_unique<Apollo>(arena, c);
  if (c.kind == "adafactor") return std::make_unique<Adafactor>(arena, c.weight_decay);
  if (c.kind == "adamw_8bit")
    return std::make_unique<AdamW8bit>(arena, AdamWConfig{c.beta1, c.beta2, c.eps, c.weight_decay});
  if (c.kind == "muon")
    return std::make_unique<Muon>(arena, AdamWConfig{c.beta1, c.beta2, c.eps, c.weight_decay});
  if (c.kind == "adam_mini")
    return std::make_unique<AdamMini>(
        arena, AdamMiniConfig{{c.beta1, c.beta2, c.eps, c.weight_decay}, c.hidden_size, c.num_heads,
                              c.num_kv_heads});
  UNILLM_THROW(ConfigError, "[optim] unknown optimizer kind '", c.kind,
               "' (implemented: ", implemented_optimizers(), ")");
}

int64_t planned_state_bytes(const std::string& kind, int64_t trainable, int64_t hidden) {
  if (kind == "sgd") return 0;
  if (kind == "galore" || kind == "apollo") return planned_low_rank_state_bytes(trainable);
  if (kind == "adafactor") return hidden > 0 ? 4 * (trainable / hidden + hidden) : 4 * trainable;
  if (kind == "adamw_8bit") return 2 * trainable + 2 * 4 * ((trainable + 255) / 256);
  // muon: a momentum per element (memory_plan adds AdamW's second moment of embeddings/lm_head);
  // adam_mini: m per element, one second moment per row of `hidden` columns (at most).
  if (kind == "muon") return 4 * trainable;
  if (kind == "adam_mini") return 4 * trainable + (hidden > 0 ? 4 * (trainable / hidden) : 0);
  return 2 * 4 * trainable;  // adamw: exp_avg + exp_avg_sq, f32
}

void apply_loraplus(ParamArena& arena, double ratio, double embedding_lr, double learning_rate) {
  UNILLM_CHECK(learning_rate > 0,
               "[optim] LoRA+ needs learning_rate > 0 (its groups are multiples of it)");
  for (auto& seg : arena.mutable_segments()) {
    auto has = [&seg](const char* s) { return seg.name.find(s) != std::string::npos; };
    if (has("lora_embedding_B")) {
      seg.lr_scale = embedding_lr / learning_rate;
      seg.decay = true;
    } else if (has("lora_B") || seg.shape.size() == 1) {
      seg.lr_scale = ratio;  // with decay or without, by HF's decay names (seg.decay as packed)
    } else {
      seg.lr_scale = 1.0;
      seg.decay = true;  // LLaMA-Factory's "lora_a" group always has weight_decay
    }
  }
}

void decay_every_segment(ParamArena& arena) {
  for (auto& seg : arena.mutable_segments()) seg.decay = true;
}

}  // namespace unillm::train
