// embedding: rows of a table picked by ids. ids i32 [N] (any shape), table [V, C] (f32/bf16/f16/f64)
// -> [.., C] in f32 (f64 for an f64 table). An id outside [0, V) throws ShapeError naming it.
// ids must be on the CPU (they are range-checked there). Kernel key dtype = the table's dtype.
// Backward (when the table requires grad): a dense d(table) [V, C] in f32 (f64 for an f64 table;
// master gradient for bf16/f16 tables) = scatter-add of the output gradient's rows by id
// (ops::scatter_add_rows, deterministic); ids get no gradient.
#pragma once

#include "core/tensor.h"

namespace unillm::ops {

struct EmbeddingArgs {
  const int32_t* ids;
  const void* table;
  void* out;
  int64_t n, vocab, dim;
  DType table_dtype, out_dtype;
};
using EmbeddingKernel = void(const EmbeddingArgs&);

Tensor embedding(const Tensor& ids, const Tensor& table);
void embedding_reference(const EmbeddingArgs& a);

}  // namespace unillm::ops
