// Reference-device kernels for the dense and data-movement ops: linear (+ backward), the LoRA
// GEMM, embedding and its scatter-add backward, add/mul, cast, strided copy, gradient
// accumulation and the KV-cache write. Naive loops with double accumulation.
#include <algorithm>

#include "kernel_util.h"

namespace unillm_ref {

namespace {

// Elements spanned by a strided view (strides >= 0).
int64_t span(int32_t ndim, const int64_t* shape, const int64_t* strides) {
  int64_t last = 0;
  for (int32_t d = 0; d < ndim; ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d];
  }
  return last + 1;
}

// Elements a row-major matrix of `rows` rows of `cols` columns with leading dimension ld spans.
int64_t matrix_span(int64_t rows, int64_t cols, int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
}

// c[i, j] = Σ_p a[i, p] · b[j, p] for row-major a [m, k] and b [n, k] (both as doubles).
std::vector<double> gemm_nt(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                            int64_t n, int64_t k) {
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double* ar = a.data() + i * k;
      const double* br = b.data() + j * k;
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += ar[p] * br[p];
      c[static_cast<size_t>(i * n + j)] = acc;
    }
  return c;
}

// The [cols, rows] transpose of a row-major [rows, cols] matrix.
std::vector<double> transposed(const std::vector<double>& a, int64_t rows, int64_t cols) {
  std::vector<double> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      t[static_cast<size_t>(c * rows + r)] = a[static_cast<size_t>(r * cols + c)];
  return t;
}

void store_all(void* p, unillm_dtype t, const std::vector<double>& v) {
  for (size_t i = 0; i < v.size(); ++i) store(p, t, static_cast<int64_t>(i), v[i]);
}

unillm_status linear(unillm_stream s, const void* args, size_t size) {
  using A = unillm_linear_args;
  return launch<A>(
      s, args, size, "linear",
      [](A& a, Resolver& r) {
        r.need(a.x, times(a.m, a.k), a.x_dtype, "x");
        r.need(a.w, times(a.n, a.k), a.w_dtype, "w");
        r.map(a.bias, a.n, a.x_dtype);
        r.need(a.y, times(a.m, a.n), a.x_dtype, "y");
      },
      [](const A& a) {
        std::vector<double> y = gemm_nt(load_all(a.x, a.x_dtype, a.m * a.k),
                                        load_all(a.w, a.w_dtype, a.n * a.k), a.m, a.n, a.k);
        for (int64_t i = 0; a.bias && i < a.m; ++i)
          for (int64_t j = 0; j < a.n; ++j)
            y[static_cast<size_t>(i * a.n + j)] += load(a.bias, a.x_dtype, j);
        store_all(a.y, a.x_dtype, y);
      });
}

unillm_status linear_backward(unillm_stream s, const void* args, size_t size) {
  using A = unillm_linear_backward_args;
  return launch<A>(
      s, args, size, "linear_backward",
      [](A& a, Resolver& r) {
        r.need(a.dy, times(a.m, a.n), a.x_dtype, "dy");
        if (a.dw) r.need(a.x, times(a.m, a.k), a.x_dtype, "x");
        if (a.dx) r.need(a.w, times(a.n, a.k), a.w_dtype, "w");
        r.map(a.dx, a.m * a.k, a.x_dtype);
        r.map(a.dw, a.n * a.k, master_dtype(a.w_dtype));
        r.map(a.db, a.n, a.x_dtype);
      },
      [](const A& a) {
        const std::vector<double> dy = load_all(a.dy, a.x_dtype, a.m * a.n);
        const std::vector<double> dyt = transposed(dy, a.m, a.n);  // [n, m]
        if (a.dx)  // dx[i, p] = Σ_j dy[i, j] · w[j, p]
          store_all(a.dx, a.x_dtype,
                    gemm_nt(dy, transposed(load_all(a.w, a.w_dtype, a.n * a.k), a.n, a.k), a.m, a.k,
                            a.n));
        if (a.dw)  // dw[j, p] = Σ_i dy[i, j] · x[i, p]
          store_all(a.dw, master_dtype(a.w_dtype),
                    gemm_nt(dyt, transposed(load_all(a.x, a.x_dtype, a.m * a.k), a.m, a.k), a.n,
                            a.k, a.m));
        for (int64_t j = 0; a.db && j < a.n; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < a.m; ++i) acc += dyt[static_cast<size_t>(j * a.m + i)];
          store(a.db, a.x_dtype, j, acc);
        }
      });
}

unillm_status lora_gemm(unillm_stream s, const void* args, size_t size) {
  using A = unillm_lora_gemm_args;
  return launch<A>(
      s, args, size, "lora_gemm",
      [](A& a, Resolver& r) {
        r.need(a.a, "a");
        r.need(a.b, "b");
        r.need(a.c, "c");
        r.map(a.a, a.trans_a ? matrix_span(a.k, a.m, a.lda) : matrix_span(a.m, a.k, a.lda),
              a.dtype);
        r.map(a.b, a.trans_b ? matrix_span(a.n, a.k, a.ldb) : matrix_span(a.k, a.n, a.ldb),
              a.dtype);
        r.map(a.c, matrix_span(a.m, a.n, a.ldc), a.dtype);
      },
      [](const A& a) {
        // op(a) as [m, k] and op(b)ᵀ as [n, k], so the product is one gemm_nt.
        std::vector<double> oa(static_cast<size_t>(a.m * a.k)), obt(static_cast<size_t>(a.n * a.k));
        for (int64_t i = 0; i < a.m; ++i)
          for (int64_t p = 0; p < a.k; ++p)
            oa[static_cast<size_t>(i * a.k + p)] =
                load(a.a, a.dtype, a.trans_a ? p * a.lda + i : i * a.lda + p);
        for (int64_t j = 0; j < a.n; ++j)
          for (int64_t p = 0; p < a.k; ++p)
            obt[static_cast<size_t>(j * a.k + p)] =
                load(a.b, a.dtype, a.trans_b ? j * a.ldb + p : p * a.ldb + j);
        const std::vector<double> prod = gemm_nt(oa, obt, a.m, a.n, a.k);
        for (int64_t i = 0; i < a.m; ++i)
          for (int64_t j = 0; j < a.n; ++j) {
            const int64_t ic = i * a.ldc + j;
            const double old = a.beta == 0 ? 0.0 : a.beta * load(a.c, a.dtype, ic);
            store(a.c, a.dtype, ic, a.alpha * prod[static_cast<size_t>(i * a.n + j)] + old);
          }
      });
}

unillm_status embedding(unillm_stream s, const void* args, size_t size) {
  using A = unillm_embedding_args;
  return launch<A>(
      s, args, size, "embedding",
      [](A& a, Resolver& r) {
        r.need(a.ids, a.n, UNILLM_DTYPE_I32, "ids");
        r.need(a.table, times(a.vocab, a.dim), a.table_dtype, "table");
        r.need(a.out, times(a.n, a.dim), a.out_dtype, "out");
      },
      [](const A& a) {
        for (int64_t i = 0; i < a.n; ++i) {
          const int64_t id = a.ids[i];
          if (id < 0 || id >= a.vocab)
            throw std::runtime_error("id " + std::to_string(id) + " outside the table");
          for (int64_t c = 0; c < a.dim; ++c)
            store(a.out, a.out_dtype, i * a.dim + c, load(a.table, a.table_dtype, id * a.dim + c));
        }
      });
}

unillm_status scatter_add_rows(unillm_stream s, const void* args, size_t size) {
  using A = unillm_scatter_rows_args;
  return launch<A>(
      s, args, size, "scatter_add_rows",
      [](A& a, Resolver& r) {
        r.need(a.idx, a.m, UNILLM_DTYPE_I32, "idx");
        r.need(a.src, times(a.m, a.dim), a.dtype, "src");
        r.need(a.dst, times(a.rows, a.dim), a.dtype, "dst");
      },
      [](const A& a) {
        std::vector<double> acc(static_cast<size_t>(a.rows * a.dim), 0.0);
        for (int64_t i = 0; i < a.m; ++i) {  // increasing i per row: the order the ABI fixes
          const int64_t row = a.idx[i];
          if (row < 0 || row >= a.rows) throw std::runtime_error("row index outside dst");
          for (int64_t c = 0; c < a.dim; ++c)
            acc[static_cast<size_t>(row * a.dim + c)] += load(a.src, a.dtype, i * a.dim + c);
        }
        for (int64_t e = 0; e < a.rows * a.dim; ++e)
          store(a.dst, a.dtype, e, acc[static_cast<size_t>(e)]);
      });
}

template <bool kMul>
unillm_status binary(unillm_stream s, const void* args, size_t size) {
  using A = unillm_binary_args;
  return launch<A>(
      s, args, size, kMul ? "mul" : "add",
      [](A& a, Resolver& r) {
        r.need(a.a, a.n, a.dtype, "a");
        r.need(a.b, a.n, a.dtype, "b");
        r.need(a.out, a.n, a.dtype, "out");
      },
      [](const A& a) {
        for (int64_t i = 0; i < a.n; ++i) {
          const double x = load(a.a, a.dtype, i), y = load(a.b, a.dtype, i);
          store(a.out, a.dtype, i, kMul ? x * y : x + y);
        }
      });
}

unillm_status cast(unillm_stream s, const void* args, size_t size) {
  using A = unillm_cast_args;
  return launch<A>(
      s, args, size, "cast",
      [](A& a, Resolver& r) {
        r.need(a.src, a.n, a.src_dtype, "src");
        r.need(a.dst, a.n, a.dst_dtype, "dst");
      },
      [](const A& a) {
        for (int64_t i = 0; i < a.n; ++i) store(a.dst, a.dst_dtype, i, load(a.src, a.src_dtype, i));
      });
}

unillm_status copy(unillm_stream s, const void* args, size_t size) {
  using A = unillm_copy_args;
  return launch<A>(
      s, args, size, "copy",
      [](A& a, Resolver& r) {
        if (a.ndim < 0 || a.ndim > UNILLM_MAX_DIMS) return r.fail("ndim out of range");
        for (int32_t d = 0; d < a.ndim; ++d)
          if (a.shape[d] < 0 || a.src_strides[d] < 0 || a.dst_strides[d] < 0)
            return r.fail("negative shape or stride");
        r.need(a.src, span(a.ndim, a.shape, a.src_strides), a.src_dtype, "src");
        r.need(a.dst, span(a.ndim, a.shape, a.dst_strides), a.dst_dtype, "dst");
      },
      [](const A& a) {
        int64_t n = 1;
        for (int32_t d = 0; d < a.ndim; ++d) n *= a.shape[d];
        const auto es = static_cast<int64_t>(dtype_bytes(a.src_dtype));
        for (int64_t i = 0; i < n; ++i) {  // i → multi-index → element offsets on both sides
          int64_t rest = i, so = 0, doff = 0;
          for (int32_t d = a.ndim - 1; d >= 0; --d) {
            const int64_t at = rest % a.shape[d];
            rest /= a.shape[d];
            so += at * a.src_strides[d];
            doff += at * a.dst_strides[d];
          }
          if (a.src_dtype == a.dst_dtype)  // bytes as they are (an i64 does not fit a double)
            std::memcpy(static_cast<char*>(a.dst) + doff * es,
                        static_cast<const char*>(a.src) + so * es, es);
          else
            store(a.dst, a.dst_dtype, doff, load(a.src, a.src_dtype, so));
        }
      });
}

unillm_status accumulate(unillm_stream s, const void* args, size_t size) {
  using A = unillm_accumulate_args;
  return launch<A>(
      s, args, size, "accumulate",
      [](A& a, Resolver& r) {
        r.need(a.src, a.n, a.dtype, "src");
        r.need(a.dst, a.n, a.dtype, "dst");
      },
      [](const A& a) {
        // In the data's own precision: a sum of two f32 values rounded once, as on the CPU.
        if (a.dtype == kF32) {
          auto* d = static_cast<float*>(a.dst);
          for (int64_t i = 0; i < a.n; ++i) d[i] += static_cast<const float*>(a.src)[i];
        } else {
          auto* d = static_cast<double*>(a.dst);
          for (int64_t i = 0; i < a.n; ++i) d[i] += static_cast<const double*>(a.src)[i];
        }
      });
}

unillm_status kv_cache_write(unillm_stream s, const void* args, size_t size) {
  using A = unillm_kv_cache_write_args;
  // The cache's extent is not in the struct: each row is mapped when its slot is read (on the
  // worker); kv and the slots are mapped here.
  Pool* pool = &stream_of(s).device.pool;
  return launch<A>(
      s, args, size, "kv_cache_write",
      [](A& a, Resolver& r) {
        r.need(a.kv, times(a.n, a.row), a.dtype, "kv");
        r.need(a.slots, a.n, UNILLM_DTYPE_I32, "slots");
        r.need(a.cache, "cache");
      },
      [pool](const A& a) {
        const size_t row_bytes = static_cast<size_t>(a.row) * dtype_bytes(a.dtype);
        for (int64_t i = 0; i < a.n; ++i) {
          if (a.slots[i] < 0) continue;  // padding
          const char* dev_row =
              static_cast<const char*>(a.cache) + static_cast<size_t>(a.slots[i]) * row_bytes;
          char* to = pool->view(dev_row, row_bytes);
          if (!to)
            throw std::runtime_error("slot " + std::to_string(a.slots[i]) +
                                     " is outside device memory");
          std::memcpy(to, static_cast<const char*>(a.kv) + static_cast<size_t>(i) * row_bytes,
                      row_bytes);
        }
      });
}

}  // namespace

void add_dense_kernels(std::vector<unillm_kernel>& t) {
  for (unillm_dtype w : {kF32, kF64, kBf16, kF16}) {
    t.push_back(entry("linear", w, linear));
    t.push_back(entry("linear_backward", w, linear_backward));
    t.push_back(entry("embedding", w, embedding));
    t.push_back(entry("cast", w, cast));
  }
  for (unillm_dtype d : {kF32, kF64}) {
    t.push_back(entry("lora_gemm", d, lora_gemm));
    t.push_back(entry("scatter_add_rows", d, scatter_add_rows));
    t.push_back(entry("add", d, binary<false>));
    t.push_back(entry("mul", d, binary<true>));
    t.push_back(entry("accumulate", d, accumulate));
  }
  for (unillm_dtype d : {kF32, kF64, kBf16, kF16, UNILLM_DTYPE_I32, UNILLM_DTYPE_I64}) {
    t.push_back(entry("copy", d, copy));
    t.push_back(entry("kv_cache_write", d, kv_cache_write));
  }
}

}  // namespace unillm_ref
