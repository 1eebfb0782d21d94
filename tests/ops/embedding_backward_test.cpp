// embedding and gather_rows backward: scatter-add with repeated ids vs finite differences (f64)
// and a naive oracle (f32, bf16 tables get an f32 gradient), deterministic across calls.
#include "grad_check_util.h"
#include "ops/embedding.h"
#include "ops/gather.h"

namespace unillm {
namespace {

class EmbeddingBackwardTest : public optest::OpTest {};

std::vector<double> scatter_oracle(const std::vector<int32_t>& ids, const Tensor& dout,
                                   int64_t rows) {
  std::vector<double> d = optest::doubles(dout);
  const size_t dim = d.size() / ids.size();
  std::vector<double> out(static_cast<size_t>(rows) * dim, 0.0);
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t c = 0; c < dim; ++c) out[ids[i] * dim + c] += d[i * dim + c];
  return out;
}

TEST_F(EmbeddingBackwardTest, MatchesFiniteDifferencesInF64) {
  Tensor ids = Tensor::from_ints({3, 1, 3, 0, 6, 3}, {2, 3});
  Tensor table = optest::leaf({7, 4}, DType::f64, 1);
  optest::check_grads([&] { return ops::embedding(ids, table); }, {table}, 2);
  Tensor x = optest::leaf({5, 3}, DType::f64, 3);
  Tensor idx = Tensor::from_ints({4, 0, 4, 4, 2}, {5});
  optest::check_grads([&] { return ops::gather_rows(x, idx); }, {x}, 4);
}

TEST_F(EmbeddingBackwardTest, ScatterMatchesOracleForEveryTableDtype) {
  const int64_t vocab = 1000, dim = 40, n = 3000;
  Rng rng(7);
  std::vector<int32_t> ids(n);
  for (auto& v : ids) v = static_cast<int32_t>(rng.next_u64() % 50) * 20;  // many repeats
  Tensor idt = Tensor::from_ints(ids, {n});
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor table = optest::leaf({vocab, dim}, t, 1);
    Tensor dout = optest::randn({n, dim}, DType::f32, 2);
    autograd::backward(ops::embedding(idt, table), dout);
    ASSERT_EQ(table.grad().dtype(), DType::f32);
    optest::expect_near(table.grad(), scatter_oracle(ids, dout, vocab), 1e-4, 1e-5);
    // Deterministic: the same call gives the same bits.
    Tensor again = ops::scatter_add_rows(dout, idt, vocab);
    EXPECT_EQ(optest::doubles(again), optest::doubles(table.grad()));
  }
}

TEST_F(EmbeddingBackwardTest, GatherRowsScatterMatchesOracle) {
  Tensor x = optest::leaf({9, 6}, DType::f32, 1);
  std::vector<int32_t> idx{8, 8, 0, 3, 8};
  Tensor dout = optest::randn({5, 6}, DType::f32, 2);
  autograd::backward(ops::gather_rows(x, Tensor::from_ints(idx, {5})), dout);
  optest::expect_near(x.grad(), scatter_oracle(idx, dout, 9), 1e-6, 1e-6);
  Tensor ref = Tensor::empty({9, 6}, DType::f32);
  ops::scatter_add_rows_reference({idx.data(), dout.raw_data(), ref.raw_data(), 5, 9, 6, DType::f32});
  optest::expect_near(ref, scatter_oracle(idx, dout, 9), 1e-6, 1e-6);
}

TEST_F(EmbeddingBackwardTest, FrozenTableRecordsNothing) {
  Tensor table = optest::randn({5, 3}, DType::f32, 1);
  EXPECT_EQ(ops::embedding(Tensor::from_ints({1, 2}, {2}), table).grad_fn(), nullptr);
}

}  // namespace
}  // namespace unillm
