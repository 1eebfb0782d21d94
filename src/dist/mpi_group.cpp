// ProcessGroup over Open MPI (see mpi_group.h). Collectives over more than INT_MAX elements are
// issued as several MPI operations on consecutive chunks (MPI counts are ints; a 7B model's arena
// has more elements than that).
#include "dist/mpi_group.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace unillm::dist {
namespace {

constexpr int64_t kMaxCount = INT_MAX;

// Initialises MPI once and finalises it at exit (after every group built on it is gone: groups
// are destroyed before statics of this file only if they were, so finalize skips nothing it needs).
struct Runtime {
  Runtime() {
    int on = 0;
    MPI_Initialized(&on);
    if (!on) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      owns = true;
    }
  }
  ~Runtime() {
    int done = 0;
    MPI_Finalized(&done);
    if (owns && !done) MPI_Finalize();
  }
  bool owns = false;
};

Runtime& runtime() {
  static Runtime r;
  return r;
}

bool g_started = false;

MPI_Datatype element_type(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;  // moved as raw 16-bit patterns, never reduced
    case DType::i8:
    case DType::u4x2: return MPI_INT8_T;
  }
  return MPI_BYTE;
}

bool reducible(DType d) { return d == DType::f32 || d == DType::f64 || d == DType::i32 || d == DType::i64; }

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::sum ? MPI_SUM : MPI_MAX; }

void check_contiguous(const Tensor& t, const char* what, const char* op) {
  if (!t.defined()) UNILLM_THROW(ShapeError, "[dist] ", op, ": ", what, " is undefined");
  if (!t.is_contiguous()) UNILLM_THROW(ShapeError, "[dist] ", op, ": ", what, " must be contiguous");
}

void check_reducible(const Tensor& t, const char* op) {
  if (!reducible(t.dtype()))
    UNILLM_THROW(DTypeError, "[dist] ", op, " reduces f32, f64, i32 or i64, not ", dtype_name(t.dtype()));
}

// A host tensor to run MPI on: `t` itself on the CPU, else a host copy (copied back by finish()).
struct Staged {
  Tensor dest, host;
  bool staged = false;
  explicit Staged(const Tensor& t) : dest(t) {
    staged = !t.device().is_cpu();
    host = staged ? t.to(Device{}) : t;
  }
  void finish() {
    if (staged) dest.copy_from(host.to(dest.device()));
  }
};

class MpiWork : public Work {
 public:
  MpiWork(std::vector<MPI_Request> reqs, std::vector<Staged> keep)
      : reqs_(std::move(reqs)), keep_(std::move(keep)) {}
  ~MpiWork() override {
    if (!done_) {
      MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
      done_ = true;
    }
  }
  void wait() override {
    if (done_) return;
    MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
    done_ = true;
    for (auto& s : keep_) s.finish();  // the output (the last kept) copied back to its device
  }

 private:
  std::vector<MPI_Request> reqs_;
  std::vector<Staged> keep_;  // keeps the buffers alive until the operation ends
  bool done_ = false;
};

class MpiGroup : public ProcessGroup {
 public:
  MpiGroup(MPI_Comm comm, bool owns) : comm_(comm), owns_(owns) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiGroup() override {
    int done = 0;
    MPI_Finalized(&done);
    if (owns_ && !done) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<Work> allreduce_async(Tensor& t, ReduceOp op) override {
    check_contiguous(t, "tensor", "allreduce");
    check_reducible(t, "allreduce");
    Staged s(t);
    std::vector<MPI_Request> reqs;
    const size_t es = dtype_size(t.dtype());
    auto* base = static_cast<char*>(s.host.raw_data());
    for (int64_t off = 0; off < t.numel(); off += kMaxCount) {
      const int n = static_cast<int>(std::min<int64_t>(kMaxCount, t.numel() - off));
      reqs.emplace_back();
      MPI_Iallreduce(MPI_IN_PLACE, base + off * es, n, element_type(t.dtype()), mpi_op(op), comm_, &reqs.back());
    }
    std::vector<Staged> keep;
    keep.push_back(std::move(s));
    return std::make_unique<MpiWork>(std::move(reqs), std::move(keep));
  }

  std::unique_ptr<Work> reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_contiguous(in, "input", "reduce_scatter");
    check_contiguous(out, "output", "reduce_scatter");
    check_reducible(in, "reduce_scatter");
    if (in.dtype() != out.dtype() || in.numel() != out.numel() * size_)
      UNILLM_THROW(ShapeError, "[dist] reduce_scatter: input of ", in.numel(), " ", dtype_name(in.dtype()),
                   " elements must be ", size_, " ranks × the output's ", out.numel(), " ", dtype_name(out.dtype()));
    if (out.numel() > kMaxCount)
      UNILLM_THROW(ShapeError, "[dist] reduce_scatter: ", out.numel(), " elements per rank exceed MPI's int count");
    Staged si(in), so(out);
    std::vector<MPI_Request> reqs(1);
    MPI_Ireduce_scatter_block(si.host.raw_data(), so.host.raw_data(), static_cast<int>(out.numel()),
                              element_type(in.dtype()), mpi_op(op), comm_, &reqs[0]);
    si.staged = false;  // the input is not copied back
    std::vector<Staged> keep;
    keep.push_back(std::move(si));
    keep.push_back(std::move(so));
    return std::make_unique<MpiWork>(std::move(reqs), std::move(keep));
  }

  std::unique_ptr<Work> allgather_async(const Tensor& in, Tensor& out) override {
    check_contiguous(in, "input", "allgather");
    check_contiguous(out, "output", "allgather");
    if (in.dtype() != out.dtype() || out.numel() != in.numel() * size_)
      UNILLM_THROW(ShapeError, "[dist] allgather: output of ", out.numel(), " ", dtype_name(out.dtype()),
                   " elements must be ", size_, " ranks × the input's ", in.numel(), " ", dtype_name(in.dtype()));
    if (in.numel() > kMaxCount)
      UNILLM_THROW(ShapeError, "[dist] allgather: ", in.numel(), " elements per rank exceed MPI's int count");
    Staged si(in), so(out);
    std::vector<MPI_Request> reqs(1);
    const MPI_Datatype type = element_type(in.dtype());
    const int n = static_cast<int>(in.numel());
    MPI_Iallgather(si.host.raw_data(), n, type, so.host.raw_data(), n, type, comm_, &reqs[0]);
    si.staged = false;
    std::vector<Staged> keep;
    keep.push_back(std::move(si));
    keep.push_back(std::move(so));
    return std::make_unique<MpiWork>(std::move(reqs), std::move(keep));
  }

  void broadcast(Tensor& t, int root) override {
    check_contiguous(t, "tensor", "broadcast");
    check_rank(root, "broadcast");
    Staged s(t);
    for_chunks(s.host, [&](void* p, int n, MPI_Datatype type) { MPI_Bcast(p, n, type, root, comm_); });
    s.finish();
  }

  void send(const Tensor& t, int dst, int tag) override {
    check_contiguous(t, "tensor", "send");
    check_rank(dst, "send");
    Staged s(t);
    for_chunks(s.host, [&](void* p, int n, MPI_Datatype type) { MPI_Send(p, n, type, dst, tag, comm_); });
  }

  void recv(Tensor& t, int src, int tag) override {
    check_contiguous(t, "tensor", "recv");
    check_rank(src, "recv");
    Staged s(t);
    for_chunks(s.host, [&](void* p, int n, MPI_Datatype type) {
      MPI_Status st;
      MPI_Recv(p, n, type, src, tag, comm_, &st);
      int got = 0;
      MPI_Get_count(&st, type, &got);
      if (got != n)
        UNILLM_THROW(ShapeError, "[dist] recv from rank ", src, " tag ", tag, ": got ", got, " elements, expected ", n);
    });
    s.finish();
  }

  void barrier() override { MPI_Barrier(comm_); }

  std::unique_ptr<ProcessGroup> split(int color, int key) override {
    MPI_Comm sub;
    MPI_Comm_split(comm_, color, key, &sub);
    return std::make_unique<MpiGroup>(sub, true);
  }

 private:
  void check_rank(int r, const char* op) const {
    if (r < 0 || r >= size_) UNILLM_THROW(ShapeError, "[dist] ", op, ": rank ", r, " is not in a group of ", size_);
  }

  template <typename F>
  void for_chunks(Tensor& host, F&& f) {
    const size_t es = dtype_size(host.dtype());
    auto* base = static_cast<char*>(host.raw_data());
    for (int64_t off = 0; off < host.numel(); off += kMaxCount)
      f(base + off * es, static_cast<int>(std::min<int64_t>(kMaxCount, host.numel() - off)), element_type(host.dtype()));
  }

  MPI_Comm comm_;
  bool owns_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

ProcessGroup& world() {
  runtime();
  g_started = true;
  static MpiGroup w(MPI_COMM_WORLD, false);
  return w;
}

bool mpi_started() { return g_started; }

void abort_world(int code) {
  if (!g_started || world().size() <= 1) return;
  MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace unillm::dist
