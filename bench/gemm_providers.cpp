// f32 GEMM providers compared on unillm's linear-layer GEMMs (the "ISA" issue, gemm_providers.md):
// OpenBLAS on whatever core OPENBLAS_CORETYPE picks, oneDNN 2.6 (dnnl_sgemm and the matmul
// primitive) and BLIS 0.9 (dlopen'ed so that its BLAS symbols never shadow OpenBLAS's).
#include <cblas.h>
#include <dlfcn.h>
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

extern "C" char* openblas_get_corename();

namespace {

using Clock = std::chrono::steady_clock;
using Fn = std::function<void()>;

// One GEMM C[m, n] = A[m, k] · B[k, n], each operand given by element strides (row, column), so
// that transposes are strides: the linear layer's three forms all fit (make_desc below).
struct Operand {
  const float* p;
  int64_t rs, cs;
  double at(int64_t i, int64_t j) const { return p[i * rs + j * cs]; }
};
struct GemmDesc {
  int64_t m, n, k;
  Operand a, b;
  float* c;  // [m, n], row stride n
};

enum class Form { fwd, dx, dw };
const char* form_name(Form f) { return f == Form::fwd ? "fwd" : f == Form::dx ? "dX" : "dW"; }

struct Shape {
  const char* model;
  const char* layer;
  int64_t m, n, k;  // the forward's x [M, K] · W [N, K]ᵀ
  bool backward;    // also time dX and dW
};

// Buffers of one shape: x [M, K], w [N, K], g = dY [M, N], out large enough for any form.
struct Buffers {
  std::vector<float> x, w, g, out;
  Buffers(const Shape& s, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto fill = [&](std::vector<float>& v, size_t n) {
      v.resize(n);
      for (auto& e : v) e = nd(rng);
    };
    fill(x, s.m * s.k);
    fill(w, s.n * s.k);
    fill(g, s.m * s.n);
    out.assign(std::max({s.m * s.n, s.m * s.k, s.n * s.k}), 0.f);
  }
};

// fwd: y [M, N] = x · Wᵀ;  dX [M, K] = dY · W;  dW [N, K] = dYᵀ · x (all row-major).
GemmDesc make_desc(const Shape& s, Form f, Buffers& b) {
  const int64_t m = s.m, n = s.n, k = s.k;
  switch (f) {
    case Form::fwd:
      return {m, n, k, {b.x.data(), k, 1}, {b.w.data(), 1, k}, b.out.data()};
    case Form::dx:
      return {m, k, n, {b.g.data(), n, 1}, {b.w.data(), k, 1}, b.out.data()};
    default:
      return {n, k, m, {b.g.data(), 1, n}, {b.x.data(), k, 1}, b.out.data()};
  }
}

// Row-major BLAS arguments of an operand [r, c]: transposed when its columns are not contiguous.
struct BlasArg {
  bool trans;
  int64_t ld;
};
BlasArg blas_arg(const Operand& o) {
  return o.cs == 1 ? BlasArg{false, o.rs} : BlasArg{true, o.cs};
}

// ---------------------------------------------------------------------------------------------
// Providers. bind() turns one GEMM into a call; what it prepares (a oneDNN primitive) is not timed.

struct Provider {
  std::string name;  // with the core/arch/implementation it runs on
  std::function<Fn(const GemmDesc&, std::string* impl)> bind;
};

Provider openblas_provider() {
  Provider p;
  p.name = std::string("openblas[") + openblas_get_corename() + "]";
  p.bind = [](const GemmDesc& d, std::string* impl) -> Fn {
    *impl = openblas_get_corename();
    const BlasArg a = blas_arg(d.a), b = blas_arg(d.b);
    return [=] {
      cblas_sgemm(CblasRowMajor, a.trans ? CblasTrans : CblasNoTrans,
                  b.trans ? CblasTrans : CblasNoTrans, d.m, d.n, d.k, 1.0f, d.a.p, a.ld, d.b.p,
                  b.ld, 0.0f, d.c, d.n);
    };
  };
  return p;
}

Provider dnnl_sgemm_provider() {
  Provider p{"dnnl_sgemm", {}};
  p.bind = [](const GemmDesc& d, std::string* impl) -> Fn {
    *impl = "dnnl_sgemm";
    const BlasArg a = blas_arg(d.a), b = blas_arg(d.b);
    return [=] {
      dnnl_sgemm(a.trans ? 'T' : 'N', b.trans ? 'T' : 'N', d.m, d.n, d.k, 1.0f, d.a.p, a.ld, d.b.p,
                 b.ld, 0.0f, d.c, d.n);
    };
  };
  return p;
}

// The matmul primitive with strided memory descriptors (no reorders); created once per GEMM, as a
// framework caches primitives, and executed on a CPU stream.
Provider dnnl_matmul_provider() {
  auto eng = std::make_shared<dnnl::engine>(dnnl::engine::kind::cpu, 0);
  auto strm = std::make_shared<dnnl::stream>(*eng);
  Provider p{"dnnl_matmul", {}};
  p.bind = [eng, strm](const GemmDesc& d, std::string* impl) -> Fn {
    using md = dnnl::memory::desc;
    const auto f32 = dnnl::memory::data_type::f32;
    md a_md({d.m, d.k}, f32, {d.a.rs, d.a.cs}), b_md({d.k, d.n}, f32, {d.b.rs, d.b.cs});
    md c_md({d.m, d.n}, f32, {d.n, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), *eng);
    *impl = pd.impl_info_str();
    auto prim = std::make_shared<dnnl::matmul>(pd);
    auto a = std::make_shared<dnnl::memory>(a_md, *eng, const_cast<float*>(d.a.p));
    auto b = std::make_shared<dnnl::memory>(b_md, *eng, const_cast<float*>(d.b.p));
    auto c = std::make_shared<dnnl::memory>(c_md, *eng, d.c);
    return [=] {
      prim->execute(*strm, {{DNNL_ARG_SRC, *a}, {DNNL_ARG_WEIGHTS, *b}, {DNNL_ARG_DST, *c}});
      strm->wait();
    };
  };
  return p;
}

// BLIS through dlopen (RTLD_LOCAL | RTLD_DEEPBIND): libblis also exports sgemm_/cblas_sgemm, and
// linking it beside OpenBLAS would let the link order decide whose sgemm every caller gets.
struct Blis {
  void (*init)();
  int (*arch_id)();
  const char* (*arch_string)(int);
  const char* (*version)();
  void (*set_threads)(int64_t);
  void (*sgemm)(int, int, int64_t, int64_t, int64_t, const float*, const float*, int64_t, int64_t,
                const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t);
};

bool load_blis(Blis* b) {
  void* h = dlopen(UNILLM_BLIS_SO, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h) {
    std::fprintf(stderr, "[gemm_providers] BLIS: %s\n", dlerror());
    return false;
  }
  auto sym = [h](const char* s) { return dlsym(h, s); };
  b->init = reinterpret_cast<decltype(b->init)>(sym("bli_init"));
  b->arch_id = reinterpret_cast<decltype(b->arch_id)>(sym("bli_arch_query_id"));
  b->arch_string = reinterpret_cast<decltype(b->arch_string)>(sym("bli_arch_string"));
  b->version = reinterpret_cast<decltype(b->version)>(sym("bli_info_get_version_str"));
  b->set_threads = reinterpret_cast<decltype(b->set_threads)>(sym("bli_thread_set_num_threads"));
  b->sgemm = reinterpret_cast<decltype(b->sgemm)>(sym("bli_sgemm"));
  return b->init && b->arch_id && b->arch_string && b->version && b->set_threads && b->sgemm;
}

Provider blis_provider(const Blis& bl) {
  bl.init();  // before the first arch query: BLIS_ARCH_TYPE is checked against the initialised gks
  std::string arch = bl.arch_string(bl.arch_id());
  Provider p{"blis[" + arch + "]", {}};
  p.bind = [bl, arch](const GemmDesc& d, std::string* impl) -> Fn {
    *impl = arch;
    return [=] {
      const float one = 1.0f, zero = 0.0f;
      bl.sgemm(0, 0, d.m, d.n, d.k, &one, d.a.p, d.a.rs, d.a.cs, d.b.p, d.b.rs, d.b.cs, &zero, d.c,
               d.n, 1);
    };
  };
  return p;
}

// ---------------------------------------------------------------------------------------------
// Checks against a double-precision reference: max |c - ref| / max |ref| over all entries (small
// shape) or over 64 sampled entries of every timed GEMM (catches a wrong stride at full size).

double check(const GemmDesc& d, int64_t samples) {
  std::mt19937_64 rng(7);
  double err = 0, scale = 0;
  const int64_t total = d.m * d.n, count = samples > 0 ? std::min(samples, total) : total;
  for (int64_t s = 0; s < count; ++s) {
    const int64_t idx = samples > 0 ? static_cast<int64_t>(rng() % total) : s;
    const int64_t i = idx / d.n, j = idx % d.n;
    double ref = 0;
    for (int64_t p = 0; p < d.k; ++p) ref += d.a.at(i, p) * d.b.at(p, j);
    const double diff = std::fabs(d.c[i * d.n + j] - ref);
    if (!std::isfinite(diff)) return INFINITY;  // NaN: the provider never wrote this entry
    err = std::max(err, diff);
    scale = std::max(scale, std::fabs(ref));
  }
  return err / std::max(scale, 1e-30);
}

// ---------------------------------------------------------------------------------------------
// Machine figures: core clock from a dependent-imul loop, /proc/cpuinfo's MHz, the zmm FMA rate.

// 8 dependent imuls per trip (3-cycle latency on every x86 core since Core 2 / Zen), so
// trips × 24 / seconds ≈ Hz. Not a chain of `add $1`: Golden Cove-class cores (this Xeon, model
// 207) fold immediate adds at rename and run such a chain at ~4 per cycle (it reads ~11 GHz).
double measure_ghz() {
  const int64_t trips = 10'000'000;
  double best = 0;
  for (int rep = 0; rep < 10; ++rep) {
    uint64_t x = 1, one = 1;
    int64_t n = trips;
    auto t0 = Clock::now();
    asm volatile(
        "1:\n\t"
        "imul %2, %0\n\timul %2, %0\n\timul %2, %0\n\timul %2, %0\n\t"
        "imul %2, %0\n\timul %2, %0\n\timul %2, %0\n\timul %2, %0\n\t"
        "dec %1\n\tjnz 1b"
        : "+r"(x), "+r"(n)
        : "r"(one));
    best = std::max(best, trips * 24.0 / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best / 1e9;
}

double cpuinfo_mhz() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("cpu MHz", 0) == 0) return std::atof(line.substr(line.find(':') + 1).c_str());
  return 0;
}

std::string cpuinfo_field(const char* key) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0) return line.substr(line.find(':') + 2);
  return "?";
}

// 16 independent zmm FMA chains per thread (2 pipes × 4-cycle latency needs >= 8).
__attribute__((target("avx512f"))) double zmm_fma(int64_t iters) {
  constexpr int kChains = 16;
  __m512 a[kChains];
#pragma GCC unroll 16
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) asm volatile("" : "+v"(a[i]));
  }
  __m512 s = a[0];
#pragma GCC unroll 16
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, a[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  volatile float sink = out[0];
  (void)sink;
  return static_cast<double>(iters) * kChains * 16 * 2;
}

double measure_zmm_peak(int threads) {  // best of 10 runs of ~0.1 s, all threads together
  const int64_t iters = 4'000'000;
  double best = 0;
  for (int rep = 0; rep < 10; ++rep) {
    auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
    zmm_fma(iters);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, threads * iters * 16.0 * 16 * 2 / s);
  }
  return best / 1e9;
}

void pin_threads(int threads) {  // OpenMP thread t on the t-th CPU of the affinity mask
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
#pragma omp parallel num_threads(threads)
  {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[omp_get_thread_num() % cpus.size()], &one);
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
  }
}

// ---------------------------------------------------------------------------------------------
// Timing: every sample runs one provider `inner` times (inner sized so a sample lasts >= 20 ms);
// samples of the providers alternate (rotated order each round); the median sample is reported.

struct Options {
  int threads = 2;
  int reps = 7;
  double sample_s = 0.02;
  std::vector<std::string> providers{"openblas", "dnnl_sgemm", "dnnl_matmul", "blis"};
  std::string only;  // substring filter on "model/layer"
};

double seconds(const Fn& f, int inner) {
  auto t0 = Clock::now();
  for (int i = 0; i < inner; ++i) f();
  return std::chrono::duration<double>(Clock::now() - t0).count() / inner;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Bound {
  Fn fn;
  std::string impl;
  int inner = 1;
  std::vector<double> samples;
};

// Returns false when a provider's sampled check fails (the run then exits non-zero).
bool time_gemm(const Shape& s, Form f, const std::vector<Provider>& ps, const Options& o,
               double peak_gflops) {
  Buffers buf(s, 42);
  const GemmDesc d = make_desc(s, f, buf);
  std::vector<Bound> b(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    b[i].fn = ps[i].bind(d, &b[i].impl);
    b[i].fn();  // warm-up (first-touch, packing buffers, JIT)
    const double t = seconds(b[i].fn, 1);
    b[i].inner = std::max(1, static_cast<int>(std::ceil(o.sample_s / std::max(t, 1e-7))));
    seconds(b[i].fn, b[i].inner);  // second warm-up at the sample's length
  }
  for (int r = 0; r < o.reps; ++r)
    for (size_t j = 0; j < ps.size(); ++j) {
      Bound& x = b[(j + r) % ps.size()];
      x.samples.push_back(seconds(x.fn, x.inner));
    }
  const double flop = 2.0 * d.m * d.n * d.k;
  bool ok = true;
  for (size_t i = 0; i < ps.size(); ++i) {
    std::fill(buf.out.begin(), buf.out.end(), NAN);
    b[i].fn();
    const double err = check(d, 64), med = median(b[i].samples);
    const auto [lo, hi] = std::minmax_element(b[i].samples.begin(), b[i].samples.end());
    std::printf("RESULT\t%s\t%s\t%s\t%s\t%ld\t%ld\t%ld\t%.4f\t%.4f\t%.4f\t%.2f\t%.1f\t%.1e\t%s\n",
                ps[i].name.c_str(), s.model, s.layer, form_name(f), s.m, s.n, s.k, med * 1e3,
                *lo * 1e3, *hi * 1e3, flop / med / 1e9, 100 * flop / med / 1e9 / peak_gflops, err,
                b[i].impl.c_str());
    std::fflush(stdout);
    ok = ok && err < 1e-4;
  }
  return ok;
}

// The full-entry check on a small odd shape, every form, every provider; false if any fails.
bool check_small(const std::vector<Provider>& ps) {
  const Shape s{"check", "small", 67, 45, 131, true};
  bool ok = true;
  for (const Provider& p : ps)
    for (Form f : {Form::fwd, Form::dx, Form::dw}) {
      Buffers buf(s, 3);
      const GemmDesc d = make_desc(s, f, buf);
      std::string impl;
      p.bind(d, &impl)();
      const double err = check(d, 0);
      std::printf("CHECK\t%s\t%s\t%.2e\t%s\t%s\n", p.name.c_str(), form_name(f), err,
                  err < 1e-4 ? "ok" : "FAIL", impl.c_str());
      ok = ok && err < 1e-4;
    }
  return ok;
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> table = {
      // stories15M training: C 288, F 768, V 32000; 4 × 256 tokens; lm_head in 262-row chunks
      {"15M-train", "qkv", 1024, 864, 288, true},
      {"15M-train", "o", 1024, 288, 288, true},
      {"15M-train", "gate_up", 1024, 1536, 288, true},
      {"15M-train", "down", 1024, 288, 768, true},
      {"15M-train", "lm_head", 262, 32000, 288, true},
      // stories110M training: C 768, F 2048; lm_head in 128-row chunks
      {"110M-train", "qkv", 1024, 2304, 768, true},
      {"110M-train", "o", 1024, 768, 768, true},
      {"110M-train", "gate_up", 1024, 4096, 768, true},
      {"110M-train", "down", 1024, 768, 2048, true},
      {"110M-train", "lm_head", 128, 32000, 768, true},
      // stories110M decode / prefill: forward only
      {"110M-M1", "qkv", 1, 2304, 768, false},
      {"110M-M1", "lm_head", 1, 32000, 768, false},
      {"110M-M4", "qkv", 4, 2304, 768, false},
      {"110M-M4", "lm_head", 4, 32000, 768, false},
      {"110M-M16", "qkv", 16, 2304, 768, false},
      {"110M-M16", "lm_head", 16, 32000, 768, false},
      {"110M-M64", "qkv", 64, 2304, 768, false},
      {"110M-M64", "lm_head", 64, 32000, 768, false},
      {"110M-M256", "qkv", 256, 2304, 768, false},
      {"110M-M256", "lm_head", 256, 32000, 768, false},
  };
  return table;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&](const char* key) { return a.substr(std::strlen(key)); };
    if (a.rfind("--threads=", 0) == 0)
      o.threads = std::atoi(val("--threads=").c_str());
    else if (a.rfind("--reps=", 0) == 0)
      o.reps = std::atoi(val("--reps=").c_str());
    else if (a.rfind("--sample-ms=", 0) == 0)
      o.sample_s = std::atof(val("--sample-ms=").c_str()) / 1e3;
    else if (a.rfind("--only=", 0) == 0)
      o.only = val("--only=");
    else if (a.rfind("--providers=", 0) == 0) {
      o.providers.clear();
      std::stringstream ss(val("--providers="));
      for (std::string p; std::getline(ss, p, ',');) o.providers.push_back(p);
    } else {
      std::fprintf(
          stderr,
          "usage: gemm_providers [--threads=2] [--reps=7] [--sample-ms=20] [--only=SUBSTR]\n"
          "       [--providers=openblas,dnnl_sgemm,dnnl_matmul,blis]\n");
      std::exit(2);
    }
  }
  return o;
}

std::vector<Provider> make_providers(const Options& o) {
  std::vector<Provider> ps;
  static Blis blis;
  for (const std::string& name : o.providers) {
    if (name == "openblas")
      ps.push_back(openblas_provider());
    else if (name == "dnnl_sgemm")
      ps.push_back(dnnl_sgemm_provider());
    else if (name == "dnnl_matmul")
      ps.push_back(dnnl_matmul_provider());
    else if (name == "blis" && load_blis(&blis)) {
      ps.push_back(blis_provider(blis));
      blis.set_threads(o.threads);
    } else
      std::fprintf(stderr, "[gemm_providers] provider '%s' unavailable, skipped\n", name.c_str());
  }
  return ps;
}

void print_machine(const Options& o, double ghz, double peak, double zmm1, double zmm) {
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const char* blis_env = std::getenv("BLIS_ARCH_TYPE");
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  const dnnl_version_t* v = dnnl_version();
  std::printf("MACHINE\t%s | %s family %s model %s | cpuinfo %.0f MHz\n",
              cpuinfo_field("model name").c_str(), cpuinfo_field("vendor_id").c_str(),
              cpuinfo_field("cpu family").c_str(), cpuinfo_field("model\t").c_str(), cpuinfo_mhz());
  std::printf(
      "PEAK\t%.3f GHz (dependent-imul loop)\t%.1f GFLOP/s theoretical (%d cores x 2 FMA x "
      "16 lanes x 2 flop)\tmeasured zmm FMA: %.1f GFLOP/s on 1 thread, %.1f on %d\n",
      ghz, peak, o.threads, zmm1, zmm, o.threads);
  std::printf(
      "ENV\tOPENBLAS_CORETYPE=%s\tBLIS_ARCH_TYPE=%s\tOMP_WAIT_POLICY=%s\tthreads=%d\treps=%d\n",
      env ? env : "(unset)", blis_env ? blis_env : "(unset)", wait ? wait : "(unset)", o.threads,
      o.reps);
  std::printf("LIBS\tOpenBLAS core %s\toneDNN %d.%d.%d (cpu runtime %s, max ISA %x)\n",
              openblas_get_corename(), v->major, v->minor, v->patch,
              v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other",
              static_cast<unsigned>(dnnl_get_effective_cpu_isa()));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  omp_set_num_threads(o.threads);  // oneDNN (OpenMP runtime) uses omp_get_max_threads()
  openblas_set_num_threads(o.threads);
  pin_threads(o.threads);
  const double ghz = measure_ghz();
  const double peak = o.threads * 2 * 16 * 2 * ghz;
  print_machine(o, ghz, peak, measure_zmm_peak(1), measure_zmm_peak(o.threads));
  const std::vector<Provider> ps = make_providers(o);
  if (ps.empty()) return 1;
  if (!check_small(ps)) {
    std::fprintf(stderr, "[gemm_providers] a provider failed the reference check\n");
    return 1;
  }
  bool failed = false;
  for (const Shape& s : shapes()) {
    if (!o.only.empty() && (std::string(s.model) + "/" + s.layer).find(o.only) == std::string::npos)
      continue;
    bool ok = time_gemm(s, Form::fwd, ps, o, peak);
    if (s.backward) {
      ok = time_gemm(s, Form::dx, ps, o, peak) && ok;
      ok = time_gemm(s, Form::dw, ps, o, peak) && ok;
    }
    if (!ok) failed = true;
  }
  if (failed) std::fprintf(stderr, "[gemm_providers] a timed GEMM failed its sampled check\n");
  return failed ? 1 : 0;
}
