// TRL's value head (see value_head.h).
#include "models/value_head.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/shape.h"

namespace unillm::models {

namespace fs = std::filesystem;

namespace {
const char* kFile = "value_head.safetensors";
}  // namespace

ValueHead::ValueHead(int64_t hidden, Rng& rng, Device device, Kind kind) : hidden_(hidden), kind_(kind) {
  std::vector<float> w(static_cast<size_t>(hidden)), b(1, 0.0f);
  if (kind == Kind::kTrl) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
    for (auto& e : w) e = static_cast<float>((2 * rng.uniform_double() - 1) * bound);
    b[0] = static_cast<float>((2 * rng.uniform_double() - 1) * bound);
  } else {
    const double std = 1.0 / (static_cast<double>(hidden) * 10.0);  // v1's _init_score_head
    for (auto& e : w) e = static_cast<float>(rng.normal() * std);
  }
  weight_ = Tensor::from_vector(w, {1, hidden}).to(device);
  bias_ = Tensor::from_vector(b, {1}).to(device);
  summary_.register_parameter("weight", &weight_);
  summary_.register_parameter("bias", &bias_);
  if (kind == Kind::kTrl) {
    v_head_.register_module("summary", &summary_);
    register_module("v_head", &v_head_);
  } else {
    register_module("score", &summary_);
  }
}

bool has_value_head(const std::string& dir) { return !dir.empty() && fs::exists(fs::path(dir) / kFile); }

namespace {

// Where dir keeps a score head: its TOKEN_CLS adapter's file, else its model weights.
std::optional<io::CheckpointReader> score_source(const std::string& dir, std::string& prefix, std::string& path) {
  const fs::path adapter = fs::path(dir) / "adapter_model.safetensors";
  if (fs::exists(adapter)) {
    prefix = "base_model.model.", path = adapter.string();
    io::CheckpointReader r = io::CheckpointReader::open(path);
    if (r.has(prefix + "score.weight")) return r;
    return std::nullopt;
  }
  if (!fs::exists(fs::path(dir) / "config.json")) return std::nullopt;
  prefix.clear(), path = dir;
  io::CheckpointReader r = io::CheckpointReader::open(dir);
  if (r.has("score.weight")) return r;
  return std::nullopt;
}

}  // namespace

bool ValueHead::load(const std::string& dir) {
  std::string prefix, path;
  std::optional<io::CheckpointReader> ckpt;
  if (kind_ == Kind::kScore) {
    if (dir.empty() || !(ckpt = score_source(dir, prefix, path))) return false;
  } else {
    if (!has_value_head(dir)) return false;
    path = (fs::path(dir) / kFile).string();
    ckpt = io::CheckpointReader::open(path);
  }
  const nn::NamedTensors names = tensors();
  auto read = [&](const std::string& key, Tensor& into, const Shape& shape) {
    if (!ckpt->has(key)) UNILLM_THROW(IoError, "[value_head] ", path, " has no '", key, "'");
    const auto info = ckpt->info(key);
    if (info.shape != shape)
      UNILLM_THROW(IoError, "[value_head] ", path, ": '", key, "' has shape ", shape_str(info.shape), ", expected ",
                   shape_str(shape), " (a head of another model?)");
    into.copy_from(ckpt->get(key).to(DType::f32));
  };
  read(prefix + names[0].first, weight_, {1, hidden_});
  read(prefix + names[1].first, bias_, {1});
  return true;
}

nn::NamedTensors ValueHead::tensors() const {
  const std::string at = kind_ == Kind::kTrl ? "v_head.summary." : "score.";
  return {{at + "weight", weight_.detach()}, {at + "bias", bias_.detach()}};
}

void ValueHead::save(const std::string& dir) const {
  if (kind_ == Kind::kTrl) io::save_safetensors((fs::path(dir) / kFile).string(), tensors());
}

Tensor ValueHead::forward(const Tensor& h, double keep_prob, Rng* rng) const {
  Tensor x = h;
  if (keep_prob < 1.0 && rng != nullptr) {
    std::vector<float> mask(static_cast<size_t>(h.numel()));
    const auto scale = static_cast<float>(1.0 / keep_prob);
    for (auto& m : mask) m = rng->uniform_double() < keep_prob ? scale : 0.0f;
    x = ops::mul(h, Tensor::from_vector(mask, h.shape()).to(h.device()));
  }
  return ops::reshape(ops::linear(x, weight_, bias_), {h.size(0)});
}

}  // namespace unillm::models
