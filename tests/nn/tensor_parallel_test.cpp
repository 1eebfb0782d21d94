// Tensor parallelism in nn (nn/tensor_parallel.h): an MLP (gate/up column-parallel with biases,
// down_proj row-parallel) with LoRA adapters under dropout on both, split over 2 and 4 ranks run
// as threads of one process with a Collective over shared memory, against the whole layer: every
// rank's output and input gradient equal the whole layer's (their rows of it under sequence
// parallelism, uneven shares included), and the ranks' parameter gradients sum to the whole
// layer's (each rank's non-zero only in its block, or a partial sum); plus the split checks'
// messages; and frozen weights held as each rank's block.
#include "nn/tensor_parallel.h"

#include <gtest/gtest.h>

#include <barrier>
#include <memory>
#include <thread>
#include <vector>

#include "autograd/engine.h"
#include "core/rng.h"
#include "nn/mlp.h"
#include "ops/elementwise.h"
#include "support/expect.h"

namespace unillm::nn {
namespace {

// The ranks of a group are threads; allreduce_sum: post the tensor, wait for all, add every
// rank's (in rank order, so all get the same sum), wait, write it back.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), sync_(size), slots_(static_cast<size_t>(size)) {}
  int size() const { return size_; }
  void allreduce_sum(int rank, Tensor& t) {
    slots_[static_cast<size_t>(rank)] = &t;
    sync_.arrive_and_wait();
    Tensor sum = Tensor::zeros(t.shape(), t.dtype());
    float* s = sum.data<float>();
    for (const Tensor* other : slots_)
      for (int64_t i = 0; i < t.numel(); ++i) s[i] += other->data<float>()[i];
    sync_.arrive_and_wait();
    t.copy_from(sum);
  }

 private:
  int size_;
  std::barrier<> sync_;
  std::vector<Tensor*> slots_;
};

class ThreadCollective : public Collective {
 public:
  ThreadCollective(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size(); }
  void allreduce_sum(Tensor& t) override { g_.allreduce_sum(rank_, t); }
  // Through allreduce_sum: each rank's block placed in zeros and summed.
  void allgather(const Tensor& in, Tensor& out) override {
    Tensor all = Tensor::zeros(out.shape(), out.dtype());
    const int64_t k = in.size(0);
    all.slice(0, rank_ * k, (rank_ + 1) * k).copy_from(in);
    g_.allreduce_sum(rank_, all);
    out.copy_from(all);
  }
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override {
    Tensor sum = in.clone();
    g_.allreduce_sum(rank_, sum);
    const int64_t k = out.size(0);
    out.copy_from(sum.slice(0, rank_ * k, (rank_ + 1) * k));
  }

 private:
  ThreadGroup& g_;
  int rank_;
};

Tensor randn(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& e : v) e = static_cast<float>(scale * rng.normal());
  return Tensor::from_vector(v, shape, DType::f32);
}

// An MLP (hidden 8, width 12, biases) with adapter "a" (rank 2, dropout 0.25) on gate/up and
// down_proj, every parameter random (B too, so the adapters contribute) and requiring grad.
std::unique_ptr<MLP> make_mlp() {
  auto mlp = std::make_unique<MLP>(8, 12, true, ParamPlacement(DType::f32));
  LoraConfig c;
  c.rank = 2;
  c.alpha = 4;
  c.dropout = 0.25;
  c.target_modules = {"all"};
  Rng rng(3);
  mlp->for_each_module("", [&](const std::string&, Module& m) {
    if (auto* f = dynamic_cast<FusedLinear*>(&m)) {
      std::vector<size_t> parts;
      for (size_t p = 0; p < f->parts().size(); ++p) parts.push_back(p);
      f->add_lora("a", c, parts, rng, parts.size());
    }
  });
  uint64_t seed = 10;
  for (auto& p : mlp->parameters()) {
    p.tensor->copy_from(randn(p.tensor->shape(), ++seed, 0.5));
    p.tensor->set_requires_grad(true);
  }
  return mlp;
}

struct Result {
  Tensor y, dx;
  std::vector<Tensor> grads;  // in parameters() order
};

// The layer over 6 tokens, upstream gradient R; under sequence parallelism the rank's rows of
// both (its y and dx are then those rows).
Result run(MLP& mlp, Collective* group, bool sequence = false) {
  TensorParallel tp{group, sequence, 6};
  Tensor x = randn({6, 8}, 1), dy = randn({6, 8}, 2);
  if (sequence) {
    const auto [lo, hi] = tp.rows();
    x = x.slice(0, lo, hi).contiguous();
    dy = dy.slice(0, lo, hi).contiguous();
  }
  x.set_requires_grad(true);
  LoraRun lora;
  lora.active = {"a"};
  lora.dropout = true;
  lora.seed = 77;
  Tensor y = mlp.forward(x, &lora, ops::OutputUse::kValue, group ? &tp : nullptr);
  autograd::backward(y, dy);
  Result r{y, x.grad(), {}};
  for (auto& p : mlp.parameters()) r.grads.push_back(p.tensor->grad().defined() ? p.tensor->grad().clone() : Tensor());
  return r;
}

// Every rank's output and input gradient are the whole layer's (their rows under sequence
// parallelism: 6 tokens over 4 ranks are 1, 2, 1, 2 rows), and the ranks' parameter gradients sum
// to the whole layer's (each non-zero only in its block, or a partial sum; rank 0 alone adds a
// row-parallel bias).
void expect_ranks_give_the_whole(const Result& whole, const std::vector<Result>& ranks, bool sequence) {
  const auto size = static_cast<int64_t>(ranks.size());
  for (int64_t r = 0; r < size; ++r) {
    const Result& got = ranks[static_cast<size_t>(r)];
    const int64_t lo = sequence ? r * 6 / size : 0, hi = sequence ? (r + 1) * 6 / size : 6;
    testing::expect_close(got.y, whole.y.slice(0, lo, hi).contiguous(), 1e-5, 1e-5);
    testing::expect_close(got.dx, whole.dx.slice(0, lo, hi).contiguous(), 1e-5, 1e-5);
  }
  ASSERT_EQ(ranks[0].grads.size(), whole.grads.size());
  for (size_t i = 0; i < whole.grads.size(); ++i) {
    if (!whole.grads[i].defined()) continue;  // a frozen weight
    Tensor sum = Tensor::zeros(whole.grads[i].shape(), DType::f32);
    for (const Result& got : ranks)
      if (got.grads[i].defined()) sum = ops::add(sum, got.grads[i]);
    testing::expect_close(sum, whole.grads[i], 1e-5, 1e-5);
  }
}

TEST(TensorParallel, SplitMlpWithLoraGivesTheWholeLayer) {
  testing::init_cpu();
  auto whole_mlp = make_mlp();
  const Result whole = run(*whole_mlp, nullptr);
  for (const auto& [size, sequence] : std::vector<std::pair<int, bool>>{{2, false}, {4, false}, {2, true}, {4, true}}) {
    ThreadGroup group(size);
    std::vector<std::unique_ptr<MLP>> mlps;
    for (int r = 0; r < size; ++r) mlps.push_back(make_mlp());
    std::vector<Result> ranks(static_cast<size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        ThreadCollective c(group, r);
        ranks[static_cast<size_t>(r)] = run(*mlps[static_cast<size_t>(r)], &c, sequence);
      });
    for (auto& t : threads) t.join();
    expect_ranks_give_the_whole(whole, ranks, sequence);
  }
}

// Frozen split weights held as blocks (FusedLinear::hold_block, train/tp_blocks.h): each rank
// keeps only the block it multiplies (gate/up's two parts' rows, down_proj's columns), the whole
// weights then hold no memory, and the split layer still gives the whole layer's output, input
// gradient and adapter gradients; a whole forward is refused naming the layer; gather_whole
// brings back every rank's weights exactly (the block let go meanwhile), and release_whole cuts
// the block again and lets the whole go.
TEST(TensorParallel, FrozenWeightsHeldAsBlocksGiveTheWholeLayer) {
  testing::init_cpu();
  auto frozen_mlp = [] {
    auto mlp = make_mlp();
    mlp->for_each_module("", [](const std::string&, Module& m) {
      if (auto* f = dynamic_cast<FusedLinear*>(&m)) const_cast<Tensor&>(f->weight()).set_requires_grad(false);
    });
    return mlp;
  };
  auto linears = [](MLP& mlp) {
    std::vector<FusedLinear*> out;
    mlp.for_each_module("", [&](const std::string&, Module& m) {
      if (auto* f = dynamic_cast<FusedLinear*>(&m)) out.push_back(f);
    });
    return out;
  };
  auto whole_mlp = frozen_mlp();
  const Result whole = run(*whole_mlp, nullptr);
  for (const auto& [size, sequence] : std::vector<std::pair<int, bool>>{{2, false}, {4, true}}) {
    ThreadGroup group(size);
    std::vector<std::unique_ptr<MLP>> mlps;
    for (int r = 0; r < size; ++r) mlps.push_back(frozen_mlp());
    std::vector<Result> ranks(static_cast<size_t>(size));
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        ThreadCollective c(group, r);
        MLP& mlp = *mlps[static_cast<size_t>(r)];
        for (FusedLinear* f : linears(mlp)) {
          const int64_t bytes = static_cast<int64_t>(f->weight().nbytes());
          f->hold_block(c);
          EXPECT_TRUE(f->holds_block());
          EXPECT_FALSE(f->whole_in_memory());
          EXPECT_EQ(static_cast<int64_t>(f->block().nbytes()) * size, bytes);
        }
        ranks[static_cast<size_t>(r)] = run(mlp, &c, sequence);
        try {
          run(mlp, nullptr);
        } catch (const NotImplemented& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
        for (FusedLinear* f : linears(mlp)) f->gather_whole();
        auto original = linears(*whole_mlp);
        auto mine = linears(mlp);
        for (size_t i = 0; i < mine.size(); ++i) {
          EXPECT_TRUE(mine[i]->whole_in_memory());
          EXPECT_FALSE(mine[i]->block().defined());  // a whole-model phase holds the whole alone
          testing::expect_close(mine[i]->weight(), original[i]->weight(), 0, 0);
          mine[i]->release_whole();
          EXPECT_FALSE(mine[i]->whole_in_memory());
          EXPECT_TRUE(mine[i]->block().defined());
        }
      });
    for (auto& t : threads) t.join();
    expect_ranks_give_the_whole(whole, ranks, sequence);
    for (int r = 0; r < size; ++r)
      EXPECT_NE(errors[static_cast<size_t>(r)].find("gate_proj: a forward of the whole layer reads the whole weight, "
                                                    "but this process holds only its tensor-parallel block"),
                std::string::npos)
          << errors[static_cast<size_t>(r)];
  }
}

// Tensor beside context parallelism (nest): the rows are cut into size / nest shards, each over
// its run of nest ranks, so a run's rows are exactly its shard and every rank's share is at most
// ⌈N / size⌉ (the collectives' block); together they cover the N once, in rank order.
TEST(TensorParallel, NestedRowsGiveEachRunItsShard) {
  ThreadGroup g(6);
  for (int64_t n : {6, 7, 11, 13, 24, 29}) {
    std::vector<std::unique_ptr<ThreadCollective>> ranks;
    for (int r = 0; r < 6; ++r) ranks.push_back(std::make_unique<ThreadCollective>(g, r));
    for (int nest : {2, 3}) {
      int64_t next = 0;
      for (int r = 0; r < 6; ++r) {
        const TensorParallel tp{ranks[static_cast<size_t>(r)].get(), true, n, true, nest};
        const auto [lo, hi] = tp.rows();
        EXPECT_EQ(lo, next) << n << " " << nest << " " << r;
        EXPECT_LE(hi - lo, (n + 5) / 6) << n << " " << nest << " " << r;
        next = hi;
        if (r % nest == nest - 1) {  // a run ends with its shard
          const int64_t shards = 6 / nest, s = r / nest;
          EXPECT_EQ(hi, (s + 1) * n / shards) << n << " " << nest << " " << r;
        }
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(TensorParallel, SplitChecksNameTheLayer) {
  testing::init_cpu();
  MLP mlp(8, 12, false, ParamPlacement(DType::f32));
  mlp.check_split(4);  // 12 rows and 12 input columns split 4 ways
  testing::expect_throw_with<ConfigError>([&] { mlp.check_split(5); },
                                          "gate_proj has 12 output rows, which tensor_parallel_degree 5 does not divide");
  EXPECT_EQ(tp_share(12, 4, 3), (std::pair<int64_t, int64_t>{9, 12}));
}

}  // namespace
}  // namespace unillm::nn
