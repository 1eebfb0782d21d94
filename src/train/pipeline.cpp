// Pipeline parallelism's executor (see pipeline.h).
#include "train/pipeline.h"

#include <algorithm>
#include <map>
#include <memory>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/rng.h"
#include "ops/moe_balance.h"

namespace unillm::train {

double loss_head_layers(const models::ModelConfig& c) {
  const double q = static_cast<double>(c.num_heads) * c.head_dim;
  const double kv = static_cast<double>(c.num_kv_heads) * c.head_dim;
  // A sparse layer computes k experts and the shared one per token (nn/moe.h).
  const double ffn = c.num_experts > 0 ? static_cast<double>(c.num_experts_per_tok * c.moe_intermediate_size +
                                                             c.shared_expert_intermediate_size)
                                       : static_cast<double>(c.intermediate_size);
  const double layer = static_cast<double>(c.hidden_size) * (2 * q + 2 * kv + 3.0 * ffn);
  return layer > 0 ? static_cast<double>(c.vocab_size) * static_cast<double>(c.hidden_size) / layer : 0.0;
}

std::vector<int> pipeline_layer_owners(const models::ModelConfig& model, int pp, int v) {
  const auto layers = pipeline_layers(model.num_layers, pp, v, loss_head_layers(model));
  std::vector<int> owner(static_cast<size_t>(model.num_layers), 0);
  for (size_t g = 0; g < layers.size(); ++g)
    for (int64_t l = layers[g].first; l < layers[g].second; ++l) owner[static_cast<size_t>(l)] = static_cast<int>(g) % pp;
  return owner;
}

Pipeline::Pipeline(dist::ProcessGroup& group, int v, const models::ModelConfig& model)
    : group_(group),
      pp_(group.size()),
      v_(v),
      rank_(group.rank()),
      layers_(pipeline_layers(model.num_layers, pp_, v, loss_head_layers(model))) {}

std::string Pipeline::describe(int m) const {
  std::string s;
  for (int r = 0; r < pp_; ++r) {
    s += "  stage " + std::to_string(r) + ": layers";
    for (int c = 0; c < v_; ++c) {
      const auto [lo, hi] = layers_[static_cast<size_t>(c * pp_ + r)];
      s += " [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
    }
    if (r == 0) s += " + embedding";
    if (r == pp_ - 1) s += " + norm, lm_head, loss";
    s += "; " + schedule_text(pipeline_schedule(pp_, v_, m, r), v_) + "\n";
  }
  return s;
}

std::vector<double> Pipeline::run(models::CausalLM& model, const std::vector<Micro>& micros,
                                  float seed, bool recompute, const Head& head) {
  const int m = static_cast<int>(micros.size());
  const int stages = pp_ * v_;
  const int64_t hidden = model.config().hidden_size;
  // A message's tag names its channel (direction, receiving virtual stage); the schedules send
  // and receive each channel's micro-batches in the same order (simulate_schedule checks it), and
  // MPI delivers one channel's messages in the order sent.
  auto tag = [stages](bool forward, int g) { return (forward ? 0 : stages) + g; };
  const Device host{}, dev = model.device();
  Sends sends;
  auto send = [&](const Tensor& t, int dst, int tg) { send_host(sends, t, dst, tg); };
  auto recv = [&](int64_t n, int src, int tg) { return recv_rows(n, hidden, src, tg, dev); };
  // A mixture-of-experts load-balancing loss (ops::MoeBalance): its totals travel beside the
  // activations on channels of their own (after forward_only's), forward and back.
  auto totals_tag = [stages](bool forward, int g) { return (forward ? 3 : 4) * stages + g; };
  auto send_totals = [&](const ops::MoeBalance& b, int dst, int tg) {
    const std::vector<double> v = b.totals();
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::f64, host);
    std::copy(v.begin(), v.end(), t.data<double>());
    sends.push_back(group_.send_async(t, dst, tg));
  };
  auto recv_totals = [&](ops::MoeBalance& b, int src, int tg) {
    Tensor t = Tensor::empty({static_cast<int64_t>(b.totals().size())}, DType::f64, host);
    group_.recv(t, src, tg);
    b.set_totals(std::vector<double>(t.data<double>(), t.data<double>() + t.numel()));
  };
  struct Live {
    Tensor input;   // the received activation (a leaf that requires grad), undefined on stage 0
    Tensor output;  // what was sent on, or the head's root on the last stage
    Tensor seed;    // the last stage: the root's backward seed
    std::shared_ptr<ops::MoeBalance> balance;  // this chunk's, when the micro-batch has one
  };
  // (micro-batch, chunk) between its forward and backward
  std::map<std::pair<int, int>, Live> live;
  std::vector<double> losses;
  if (holds_loss()) losses.assign(static_cast<size_t>(m), 0.0);
  autograd::GradModeGuard grad_on(true);
  for (const PipeOp& op : pipeline_schedule(pp_, v_, m, rank_)) {
    const int g = op.chunk * pp_ + rank_;
    const Micro& mb = micros[static_cast<size_t>(op.micro)];
    const int64_t n = model.train_rows(mb.batch);  // this rank's rows under sequence parallelism
    Live& l = live[{op.micro, op.chunk}];
    if (op.forward) {
      if (g > 0) {
        l.input = recv(n, (g - 1) % pp_, tag(true, g));
        l.input.set_requires_grad(true);
      }
      Rng rng;
      rng.reseed(mb.dropout_seed);
      models::TrainBatch b = mb.batch;
      b.dropout_rng = &rng;
      if (mb.batch.moe_balance) {  // a fresh balance per chunk, from the predecessor's totals
        l.balance = std::make_shared<ops::MoeBalance>(*mb.batch.moe_balance);
        if (g > 0) recv_totals(*l.balance, (g - 1) % pp_, totals_tag(true, g));
        b.moe_balance = l.balance;
      }
      const auto [lo, hi] = layers_[static_cast<size_t>(g)];
      Tensor x = model.hidden_states_range(b, l.input, lo, hi, recompute);
      if (g == stages - 1) {
        HeadOut h = head(x, op.micro, b, static_cast<double>(seed));
        for (float& v : h.grad) v *= seed;
        l.output = h.root;
        l.seed = Tensor::from_vector(h.grad, h.root.shape()).to(h.root.dtype()).to(h.root.device());
        losses[static_cast<size_t>(op.micro)] = h.loss;
      } else {
        l.output = x;
        send(x, (g + 1) % pp_, tag(true, g + 1));
        if (l.balance) send_totals(*l.balance, (g + 1) % pp_, totals_tag(true, g + 1));
      }
    } else {
      if (g == stages - 1) {
        autograd::backward(l.output, l.seed);
      } else {
        Tensor dy = recv(n, (g + 1) % pp_, tag(false, g));
        // The whole forward's totals, before the routers' backward reads them.
        if (l.balance) recv_totals(*l.balance, (g + 1) % pp_, totals_tag(false, g));
        // (The first stage's output needs no gradient when nothing in it trains: freeze's later
        // layers, a frozen embedding.)
        if (l.output.grad_fn() || l.output.requires_grad()) autograd::backward(l.output, dy);
      }
      if (g > 0) {
        Tensor dx = l.input.grad();
        if (!dx.defined()) dx = Tensor::zeros({n, hidden}, DType::f32, dev);
        send(dx, (g - 1) % pp_, tag(false, g - 1));
        if (l.balance) send_totals(*l.balance, (g - 1) % pp_, totals_tag(false, g - 1));
      }
      live.erase({op.micro, op.chunk});
    }
    drop_completed(sends);
  }
  for (auto& w : sends) w->wait();
  return losses;
}

void Pipeline::forward_only(models::CausalLM& model, const std::vector<models::TrainBatch>& batches,
                            const Last& last) {
  const int stages = pp_ * v_;
  const int64_t hidden = model.config().hidden_size;
  // Channels of their own (after run()'s 2 · stages), so that a neighbour still in this pass and
  // one already in run() cannot take each other's messages. Each rank runs its chunks in (batch,
  // virtual stage) order, every receive waiting only on a lower virtual stage of the same batch or
  // an earlier batch, and sends never wait: no cycle.
  auto tag = [stages](int g) { return 2 * stages + g; };
  const Device dev = model.device();
  Sends sends;
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < batches.size(); ++i) {
    const models::TrainBatch& b = batches[i];
    const int64_t n = model.train_rows(b);
    for (int c = 0; c < v_; ++c) {
      const int g = c * pp_ + rank_;
      Tensor input;
      if (g > 0) input = recv_rows(n, hidden, (g - 1) % pp_, tag(g), dev);
      const auto [lo, hi] = layers_[static_cast<size_t>(g)];
      Tensor x = model.hidden_states_range(b, input, lo, hi, false);
      if (g == stages - 1)
        last(static_cast<int>(i), x);
      else
        send_host(sends, x, (g + 1) % pp_, tag(g + 1));
      drop_completed(sends);
    }
  }
  for (auto& w : sends) w->wait();
}

void Pipeline::send_host(Sends& sends, const Tensor& t, int dst, int tag) {
  sends.push_back(group_.send_async(t.detach().to(Device{}).contiguous(), dst, tag));
}

Tensor Pipeline::recv_rows(int64_t n, int64_t hidden, int src, int tag, Device dev) {
  Tensor t = Tensor::empty({n, hidden}, DType::f32, Device{});
  group_.recv(t, src, tag);
  return t.to(dev);
}

void Pipeline::drop_completed(Sends& sends) {
  sends.erase(std::remove_if(sends.begin(), sends.end(), [](const auto& w) { return w->test(); }), sends.end());
}

}  // namespace unillm::train
