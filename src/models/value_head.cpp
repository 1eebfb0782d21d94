// TRL's value head (see value_head.h).
#include "models/value_head.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
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

ValueHead::ValueHead(int64_t hidden, Rng& rng, Device device) : hidden_(hidden) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  std::vector<float> w(static_cast<size_t>(hidden)), b(1);
  for (auto& e : w) e = static_cast<float>((2 * rng.uniform_double() - 1) * bound);
  b[0] = static_cast<float>((2 * rng.uniform_double() - 1) * bound);
  weight_ = Tensor::from_vector(w, {1, hidden}).to(device);
  bias_ = Tensor::from_vector(b, {1}).to(device);
  summary_.register_parameter("weight", &weight_);
  summary_.register_parameter("bias", &bias_);
  v_head_.register_module("summary", &summary_);
  register_module("v_head", &v_head_);
}

bool has_value_head(const std::string& dir) { return !dir.empty() && fs::exists(fs::path(dir) / kFile); }

bool ValueHead::load(const std::string& dir) {
  if (!has_value_head(dir)) return false;
  const std::string path = (fs::path(dir) / kFile).string();
  const auto f = io::SafetensorsFile::open(path);
  auto read = [&](const char* key, Tensor& into, const Shape& shape) {
    if (!f->has(key)) UNILLM_THROW(IoError, "[value_head] ", path, " has no '", key, "'");
    Tensor t = f->tensor(key);
    if (t.shape() != shape)
      UNILLM_THROW(IoError, "[value_head] ", path, ": '", key, "' has shape ", shape_str(t.shape()), ", expected ",
                   shape_str(shape), " (a value head of another model?)");
    into.copy_from(t.to(DType::f32));
  };
  read("v_head.summary.weight", weight_, {1, hidden_});
  read("v_head.summary.bias", bias_, {1});
  return true;
}

void ValueHead::save(const std::string& dir) const {
  io::save_safetensors((fs::path(dir) / kFile).string(),
                       {{"v_head.summary.weight", weight_.detach()}, {"v_head.summary.bias", bias_.detach()}});
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
