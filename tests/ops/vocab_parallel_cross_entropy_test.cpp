// vocab_parallel_cross_entropy (ops/vocab_parallel_cross_entropy.h): the lm_head's vocabulary rows
// split over 1, 2 and 3 ranks run as threads (the reduce over shared memory), against the whole
// linear_cross_entropy: the loss (every rank's, and the shares of a row range), and the gradients —
// each rank's dW its rows of the whole dW, the ranks' dx summing to the whole dx — for an assumed
// and another actual d(loss_sum), ignored rows included.
#include "ops/vocab_parallel_cross_entropy.h"

#include <gtest/gtest.h>

#include <barrier>
#include <thread>

#include "grad_check_util.h"
#include "ops/elementwise.h"
#include "support/expect.h"

namespace unillm::optest {
namespace {

using ops::GroupReduce;
using ops::linear_cross_entropy;
using ops::vocab_parallel_cross_entropy;

// A reduce over threads: post the values, wait, combine every rank's in rank order, wait.
class ThreadReduce {
 public:
  explicit ThreadReduce(int size) : sync_(size), slots_(static_cast<size_t>(size)) {}
  void run(int rank, std::vector<double>& v, bool max) {
    slots_[static_cast<size_t>(rank)] = v;
    sync_.arrive_and_wait();
    for (size_t i = 0; i < v.size(); ++i) {
      double acc = slots_[0][i];
      for (size_t r = 1; r < slots_.size(); ++r) acc = max ? std::max(acc, slots_[r][i]) : acc + slots_[r][i];
      v[i] = acc;
    }
    sync_.arrive_and_wait();
  }

 private:
  std::barrier<> sync_;
  std::vector<std::vector<double>> slots_;
};

TEST(VocabParallelCrossEntropy, SplitVocabularyGivesTheWholeLossAndGradients) {
  testing::init_cpu();
  const int64_t n = 7, c = 5, v = 11;
  const Tensor x0 = randn({n, c}, DType::f32, 1), w0 = randn({v, c}, DType::f32, 2);
  const Tensor labels = Tensor::from_ints({3, -100, 0, 10, 5, 7, -100}, {n});
  // The whole loss and its gradients for d(loss_sum) = 0.5.
  Tensor xw = x0.clone().set_requires_grad(true), ww = w0.clone().set_requires_grad(true);
  auto whole = linear_cross_entropy(xw, ww, labels);
  autograd::backward(whole.loss_sum, Tensor::from_vector({0.5f}, {}));
  const double whole_loss = whole.loss_sum.item_flat(0);
  const double rows_2_5 =
      linear_cross_entropy(x0, w0, Tensor::from_ints({-100, -100, 0, 10, 5, -100, -100}, {n})).loss_sum.item_flat(0);
  for (int size : {1, 2, 3}) {
    ThreadReduce reduce(size);
    std::vector<Tensor> dx(static_cast<size_t>(size)), dw(static_cast<size_t>(size));
    std::vector<double> loss(static_cast<size_t>(size)), share(static_cast<size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        const int64_t v0 = r * v / size, v1 = (r + 1) * v / size;
        Tensor x = x0.clone().set_requires_grad(true);
        Tensor w = w0.slice(0, v0, v1).contiguous().set_requires_grad(true);
        GroupReduce g = [&reduce, r](std::vector<double>& vals, bool max) { reduce.run(r, vals, max); };
        // Assumed 0.25, actual 0.5: the eager gradients are rescaled.
        auto out = vocab_parallel_cross_entropy(x, w, labels, v0, v, g, 0.25);
        loss[static_cast<size_t>(r)] = out.loss_sum.item_flat(0);
        autograd::backward(out.loss_sum, Tensor::from_vector({0.5f}, {}));
        dx[static_cast<size_t>(r)] = x.grad();
        dw[static_cast<size_t>(r)] = w.grad();
        // Rows [2, 5) only: that share of the loss (the gradient stays every row's).
        auto part = vocab_parallel_cross_entropy(x0, w0.slice(0, v0, v1).contiguous(), labels, v0, v, g, 0, 2, 5);
        share[static_cast<size_t>(r)] = part.loss_sum.item_flat(0);
        EXPECT_EQ(part.count, 3);  // rows 2, 3, 4: labels 0, 10, 5
      });
    for (auto& t : threads) t.join();
    Tensor dx_sum = Tensor::zeros({n, c}, DType::f32);
    for (int r = 0; r < size; ++r) {
      EXPECT_NEAR(loss[static_cast<size_t>(r)], whole_loss, 1e-5 * std::abs(whole_loss)) << size;
      EXPECT_NEAR(share[static_cast<size_t>(r)], rows_2_5, 1e-5 * std::abs(rows_2_5)) << size;
      dx_sum = ops::add(dx_sum, dx[static_cast<size_t>(r)]);
      const int64_t v0 = r * v / size, v1 = (r + 1) * v / size;
      testing::expect_close(dw[static_cast<size_t>(r)], ww.grad().slice(0, v0, v1).contiguous(), 1e-5, 1e-5);
    }
    testing::expect_close(dx_sum, xw.grad(), 1e-5, 1e-5);
  }
}

}  // namespace
}  // namespace unillm::optest
