// embedding: row lookup for every table dtype (exact: conversion to f32 is exact) and id checks.
#include "ops/embedding.h"

#include "op_test_util.h"

namespace unillm {
namespace {

class EmbeddingTest : public optest::OpTest {};

TEST_F(EmbeddingTest, PicksRowsForEveryTableDtype) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t vocab = 11, dim = 21;
    Tensor table = optest::randn({vocab, dim}, t, 5);
    Tensor ids = Tensor::from_ints({3, 0, 10, 3, 7, 1}, {2, 3});
    Tensor out = ops::embedding(ids, table);
    EXPECT_EQ(shape_str(out.shape()), "[2, 3, 21]");
    EXPECT_EQ(out.dtype(), t == DType::f64 ? DType::f64 : DType::f32);
    std::vector<double> tv = optest::doubles(table), want;
    for (int32_t id : {3, 0, 10, 3, 7, 1})
      for (int64_t c = 0; c < dim; ++c) want.push_back(tv[id * dim + c]);
    optest::expect_near(out, want, 0, 0);
    Tensor ref = Tensor::empty(out.shape(), out.dtype());
    ops::EmbeddingArgs a{ids.data<int32_t>(), table.raw_data(), ref.raw_data(), 6, vocab, dim, t,
                         out.dtype()};
    ops::embedding_reference(a);
    optest::expect_near(ref, want, 0, 0);
  }
}

TEST_F(EmbeddingTest, ManyIdsInParallel) {
  Tensor table = optest::randn({50, 8}, DType::bf16, 6);
  std::vector<int32_t> ids(5000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7) % 50);
  Tensor out = ops::embedding(Tensor::from_ints(ids, {5000}), table);
  std::vector<double> tv = optest::doubles(table), want;
  for (int32_t id : ids)
    for (int64_t c = 0; c < 8; ++c) want.push_back(tv[id * 8 + c]);
  optest::expect_near(out, want, 0, 0);
}

TEST_F(EmbeddingTest, BadIdsAndDtypesThrow) {
  Tensor table = optest::randn({4, 3}, DType::f32, 1);
  optest::expect_throw_with<ShapeError>(
      [&] { ops::embedding(Tensor::from_ints({1, 4}, {2}), table); },
      "[embedding] id 4 at position 1 is outside the vocabulary [0, 4)");
  EXPECT_THROW(ops::embedding(Tensor::from_ints({-1}, {1}), table), ShapeError);
  EXPECT_THROW(ops::embedding(Tensor::from_vector({1}, {1}), table), DTypeError);
  EXPECT_THROW(ops::embedding(Tensor::from_ints({1}, {1}), optest::randn({4}, DType::f32, 1)),
               ShapeError);
}

}  // namespace
}  // namespace unillm
