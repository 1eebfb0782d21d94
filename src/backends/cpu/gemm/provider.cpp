// GEMM provider dispatch (provider.h). oneDNN is optional at build time (UNILLM_HAVE_DNNL): a build
// without it runs OpenBLAS at every level and reports it in `unillm env`.
#include "backends/cpu/gemm/provider.h"


#include <cblas.h>

#include <atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"

#ifdef UNILLM_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

namespace unillm::cpu {
namespace {

std::atomic<GemmProvider> g_provider{GemmProvider::openblas};
std::atomic<bool> g_bf16{false};

CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

#ifdef UNILLM_HAVE_DNNL

void check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success) UNILLM_THROW(Error, "oneDNN ", what, " failed (status ", static_cast<int>(s), ")");
}

// oneDNN's ISA cap is process-wide and can be set once, before its first kernel: the first level
// chosen in the process decides it (the CLI chooses once; tests that re-register at lower levels
// keep the first cap, which only matters for the bf16 GEMMs). AMX only at the amx_bf16 level, so
// `--isa avx512_bf16` runs the vdpbf16ps kernels.
void cap_onednn_once(IsaLevel level) {
  static std::once_flag once;
  std::call_once(once, [level] {
    dnnl_set_max_cpu_isa(level == IsaLevel::amx_bf16 ? dnnl_cpu_isa_avx512_core_amx
                                                     : dnnl_cpu_isa_avx512_core_bf16);
  });
}

const char* onednn_isa_name() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

// The matmul primitive (bf16 or f32 inputs), one per shape/stride/beta, created on first use and kept: training
// has a handful of GEMM shapes, and creating a primitive costs far more than a small GEMM. Prompt
// lengths make new shapes at inference, so the cache is bounded: past kMaxCached entries it is
// emptied and refills (oneDNN's own primitive cache still makes re-creation cheap). Calls are
// serialised by the mutex (one stream); unillm never issues two bf16 GEMMs concurrently.
struct Matmul {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  std::mutex mu;
  // (trans_a, trans_b, m, n, k, lda, ldb, ldc, accumulate, bf16 inputs)
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool>;
  struct Entry {
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, b, c;
  };
  std::map<Key, Entry> cache;
  static constexpr size_t kMaxCached = 128;

  Matmul() {
    check(dnnl_engine_create(&engine, dnnl_cpu, 0), "engine_create");
    check(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "stream_create");
  }

  static dnnl_memory_desc_t desc(int64_t rows, int64_t cols, bool trans, int64_t ld,
                                 dnnl_data_type_t dt) {
    // Logical [rows, cols]; stored row-major (stride ld, 1) or, transposed, column-major (1, ld).
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
    check(dnnl_memory_desc_init_by_strides(&md, 2, dims, dt, strides), "memory_desc");
    return md;
  }

  Entry& get(const Key& key) {
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    if (cache.size() >= kMaxCached) {
      for (auto& [k, e] : cache) dnnl_primitive_destroy(e.prim);
      cache.clear();
    }
    const auto [ta, tb, m, n, k, lda, ldb, ldc, accumulate, bf16] = key;
    Entry e;
    e.a = desc(m, k, ta, lda, bf16 ? dnnl_bf16 : dnnl_f32);
    e.b = desc(k, n, tb, ldb, bf16 ? dnnl_bf16 : dnnl_f32);
    e.c = desc(m, n, false, ldc, dnnl_f32);
    dnnl_matmul_desc_t md;
    check(dnnl_matmul_desc_init(&md, &e.a, &e.b, nullptr, &e.c), "matmul_desc_init");
    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "attr_create");
    dnnl_post_ops_t po = nullptr;
    if (accumulate) {
      check(dnnl_post_ops_create(&po), "post_ops_create");
      check(dnnl_post_ops_append_sum(po, 1.0f), "post_ops_append_sum");
      check(dnnl_primitive_attr_set_post_ops(attr, po), "set_post_ops");
    }
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &md, attr, engine, nullptr), "matmul primitive_desc");
    check(dnnl_primitive_create(&e.prim, pd), "matmul primitive_create");
    dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return cache.emplace(key, e).first->second;
  }

  void run(const Key& key, const void* a, const void* b, float* c) {
    std::lock_guard<std::mutex> lock(mu);
    Entry& e = get(key);
    dnnl_memory_t ma, mb, mc;
    check(dnnl_memory_create(&ma, &e.a, engine, const_cast<void*>(a)), "memory_create");
    check(dnnl_memory_create(&mb, &e.b, engine, const_cast<void*>(b)), "memory_create");
    check(dnnl_memory_create(&mc, &e.c, engine, c), "memory_create");
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    const dnnl_status_t s = dnnl_primitive_execute(e.prim, stream, 3, args);
    dnnl_stream_wait(stream);
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
    check(s, "matmul execute");
  }
};

// oneDNN generates its GEMM kernels and maps most of its code on the first call. Doing that at
// registration puts those ~8 MiB in the process baseline that the training memory plan measures
// (train/memory_plan.cpp), instead of surprising it mid-step.
void warm_up_onednn() {
  static std::once_flag once;
  std::call_once(once, [] {
    constexpr int64_t n = 64;
    std::vector<float> a(n * n, 1.0f), c(n * n);
    for (const char ta : {'N', 'T'})
      for (const char tb : {'N', 'T'})
        dnnl_sgemm(ta, tb, n, n, n, 1.0f, a.data(), n, a.data(), n, 0.0f, c.data(), n);
  });
}

Matmul& matmul() {
  static Matmul* m = new Matmul();  // never destroyed: kernels may run during exit
  return *m;
}

// f32 products of a few rows (batched decode, M = 5..64) run faster on the matmul primitive than
// on dnnl_sgemm (bench/gemm_providers.md: 1.45x at M = 16..64 on the stories110M shapes), which
// packs the whole weight matrix on every call. Not inside unillm's own parallel regions (the
// primitive's calls are serialised), and only for alpha 1 with beta 0 or 1.
bool small_m_matmul(int64_t m, float alpha, float beta) {
  return m >= 5 && m <= 64 && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && !in_parallel_region();
}

#endif  // UNILLM_HAVE_DNNL

}  // namespace

bool onednn_built() {
#ifdef UNILLM_HAVE_DNNL
  return true;
#else
  return false;
#endif
}

void choose_gemm_provider(IsaLevel level) {
  const bool avx512 = static_cast<int>(level) >= static_cast<int>(IsaLevel::avx512);
#ifdef UNILLM_HAVE_DNNL
  if (avx512) cap_onednn_once(level);
#endif
  g_provider = avx512 && onednn_built() ? GemmProvider::onednn : GemmProvider::openblas;
  g_bf16 = onednn_built() && static_cast<int>(level) >= static_cast<int>(IsaLevel::avx512_bf16);
#ifdef UNILLM_HAVE_DNNL
  if (g_provider == GemmProvider::onednn) warm_up_onednn();
#endif
}

GemmProvider gemm_provider() { return g_provider; }

bool bf16_gemm_available() { return g_bf16; }

std::string gemm_provider_name() {
  if (g_provider == GemmProvider::openblas)
    return onednn_built() ? "OpenBLAS (oneDNN built, used from avx512)" : "OpenBLAS (built without oneDNN)";
#ifdef UNILLM_HAVE_DNNL
  return std::string("oneDNN ") + (g_bf16 ? "(dnnl_sgemm for f32, its matmul for M = 5..64; bf16 matmul with f32 accumulation)"
                                              : "(dnnl_sgemm for f32, its matmul for M = 5..64)") +
         ", its kernels up to " + onednn_isa_name();
#else
  return "";
#endif
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#ifdef UNILLM_HAVE_DNNL
  if (g_provider == GemmProvider::onednn) {
    if (small_m_matmul(m, alpha, beta)) {
      matmul().run({trans_a, trans_b, m, n, k, lda, ldb, ldc, beta == 1.0f, false}, a, b, c);
      return;
    }
    check(dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta,
                     c, ldc),
          "dnnl_sgemm");
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, tr(trans_a), tr(trans_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
           const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
           int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_dgemm(CblasRowMajor, tr(trans_a), tr(trans_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  UNILLM_CHECK(bf16_gemm_available());
  UNILLM_CHECK(beta == 0.0f || beta == 1.0f);
  if (m == 0 || n == 0) return;
#ifdef UNILLM_HAVE_DNNL
  matmul().run({trans_a, trans_b, m, n, k, lda, ldb, ldc, beta == 1.0f, true}, a, b, c);
#else
  (void)trans_a, (void)trans_b, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
#endif
}

}  // namespace unillm::cpu
