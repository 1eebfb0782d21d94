// What every reference-device kernel shares: checking the argument struct, turning the device
// pointers in it into the plugin's read-write views (checked on the calling thread, so a bad
// pointer is a status, not a fault), queueing the body on the stream's worker, and element
// loads/stores for each dtype. Kernels compute in double: they are a second, independent
// implementation of each op, not a copy of the CPU's.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "device.h"
#include "unillm/kernel_args.h"

namespace unillm_ref {

size_t dtype_bytes(unillm_dtype t);  // 0 for a dtype the plugin does not take

constexpr unillm_dtype kF32 = UNILLM_DTYPE_F32, kF64 = UNILLM_DTYPE_F64;
constexpr unillm_dtype kBf16 = UNILLM_DTYPE_BF16, kF16 = UNILLM_DTYPE_F16;
inline bool is_f32_or_f64(unillm_dtype t) { return t == kF32 || t == kF64; }
// The dtype of a weight's gradient: f64 for an f64 weight, else the f32 master gradient.
inline unillm_dtype master_dtype(unillm_dtype w) { return w == kF64 ? kF64 : kF32; }

// Element i of p as a double, and its inverse (f32 rounds to nearest; bf16/f16 round to nearest
// even from the f32 value, as unillm's casts do).
double load(const void* p, unillm_dtype t, int64_t i);
void store(void* p, unillm_dtype t, int64_t i, double v);
// Elements [0, n) of p as doubles (the GEMMs convert their operands once, not per product).
std::vector<double> load_all(const void* p, unillm_dtype t, int64_t n);
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);

// a·b elements, or −1 (which Resolver::map refuses) when either is negative or it overflows.
inline int64_t times(int64_t a, int64_t b) {
  int64_t p = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &p)) return -1;
  return p;
}

// Maps the device pointers of one kernel call to the plugin's views. Each map() replaces a field
// in place; a null field stays null (an optional output), while need() refuses a null one, which
// would otherwise fault on the stream's worker. The first failure is kept.
class Resolver {
 public:
  Resolver(RefStream& s, const char* op) : pool_(s.device.pool), op_(op) {}
  template <class P>
  void map(P*& field, int64_t count, unillm_dtype dtype) {
    map_bytes(field, count, dtype_bytes(dtype));
  }
  // map() for a pointer the op cannot do without.
  template <class P>
  void need(P*& field, int64_t count, unillm_dtype dtype, const char* name) {
    need(field, name);
    map(field, count, dtype);
  }
  void need(const void* field, const char* name) {
    if (!field) fail(std::string(name) + " is null");
  }
  template <class P>
  void map_bytes(P*& field, int64_t count, size_t element_bytes) {
    if (!field || !error_.empty()) return;
    size_t bytes = 0;
    if (count < 0 || element_bytes == 0 ||
        __builtin_mul_overflow(static_cast<size_t>(count), element_bytes, &bytes)) {
      error_ = std::string(op_) + ": bad extent or dtype";
      return;
    }
    char* v = pool_.view(field, bytes);
    if (!v) error_ = std::string(op_) + ": a pointer is not device memory of this device";
    field = reinterpret_cast<P*>(v);
  }
  void fail(const std::string& why) {
    if (error_.empty()) error_ = std::string(op_) + ": " + why;
  }
  const std::string& error() const { return error_; }

 private:
  Pool& pool_;
  const char* op_;
  std::string error_;
};

// Copies the argument struct A (refusing one smaller than the plugin's), calls resolve(a, r) on
// this thread to map its pointers, then queues body(a) on the stream. body may throw: the
// message becomes the stream's failure, reported at its next synchronisation.
template <class A, class Resolve, class Body>
unillm_status launch(unillm_stream s, const void* args, size_t args_size, const char* op,
                     Resolve resolve, Body body) {
  if (!args || args_size < sizeof(A) || *static_cast<const size_t*>(args) < sizeof(A))
    return fail(UNILLM_ERROR_INVALID_ARGUMENT, std::string(op) + ": argument struct too small");
  A a;
  std::memcpy(&a, args, sizeof a);
  RefStream& rs = stream_of(s);
  Resolver r(rs, op);
  resolve(a, r);
  if (!r.error().empty()) return fail(UNILLM_ERROR_INVALID_ARGUMENT, r.error());
  rs.queue.enqueue([a, body, op]() -> std::string {
    try {
      body(a);
      return std::string();
    } catch (const std::exception& e) {
      return std::string(op) + ": " + e.what();
    }
  });
  return UNILLM_OK;
}

// The kernel table entries of each file (kernels_*.cpp), joined by kernels.cpp.
void add_dense_kernels(std::vector<unillm_kernel>& table);
void add_norm_kernels(std::vector<unillm_kernel>& table);
void add_attention_kernels(std::vector<unillm_kernel>& table);

inline unillm_kernel entry(const char* op, unillm_dtype dtype, unillm_kernel_fn fn) {
  return unillm_kernel{sizeof(unillm_kernel), op, dtype, "", fn};
}

}  // namespace unillm_ref
