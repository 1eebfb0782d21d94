// ProcessGroup over Open MPI (see mpi_group.h). Collectives over more than INT_MAX elements are
// issued as several MPI operations on consecutive chunks (MPI counts are ints; a 7B model's arena
// has more elements than that).
#include "dist/mpi_group.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/watchdog.h"

namespace unillm::dist {
namespace {

constexpr int64_t kMaxCount = INT_MAX;

// What every blocking operation of the world and its sub-groups goes through: the test-only faults
// (mpi_group.h), then the watchdog's deadline.
struct Blocking {
  explicit Blocking(const WorldOptions& o) : options(o), dog(o.timeout_s) { dog.set_rank(o.launch_rank); }
  Watchdog::Scope enter(const std::string& op) {
    ++count;
    if (rank == options.hang_rank && count == 1) std::this_thread::sleep_for(std::chrono::hours(1));
    if (rank == options.kill_rank && count == options.kill_at) raise(SIGKILL);
    return active ? dog.arm(op) : Watchdog::Scope();
  }
  WorldOptions options;
  Watchdog dog;
  int rank = -1;
  bool active = false;  // more than one rank in the world
  int64_t count = 0;
};

// Initialises MPI once and finalises it at exit, both under the deadline (MPI_Init and
// MPI_Finalize wait for every rank). Declared before the world group, so destroyed after it.
struct Runtime {
  explicit Runtime(Blocking& b) : blocking(b) {
    int on = 0;
    MPI_Initialized(&on);
    if (!on) {
      // Only under a launcher: a world of one has nobody to wait for.
      auto armed = blocking.options.launch_rank >= 0 ? blocking.dog.arm("MPI_Init") : Watchdog::Scope();
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      owns = true;
    }
  }
  ~Runtime() {
    int done = 0;
    MPI_Finalized(&done);
    if (owns && !done) {
      auto armed = blocking.active ? blocking.dog.arm("MPI_Finalize") : Watchdog::Scope();
      MPI_Finalize();
    }
  }
  Blocking& blocking;
  bool owns = false;
};

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
  MpiWork(std::vector<MPI_Request> reqs, std::vector<Staged> keep, Blocking* b, std::string op)
      : reqs_(std::move(reqs)), keep_(std::move(keep)), blocking_(b), op_(std::move(op)) {}
  ~MpiWork() override {
    if (!done_) {
      auto armed = blocking_->enter(op_);
      MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
      done_ = true;
    }
  }
  void wait() override {
    if (done_) return;
    auto armed = blocking_->enter(op_);
    MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
    done_ = true;
    for (auto& s : keep_) s.finish();  // the output (the last kept) copied back to its device
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE);
    if (!flag) return false;
    done_ = true;
    for (auto& s : keep_) s.finish();
    return true;
  }

 private:
  std::vector<MPI_Request> reqs_;
  std::vector<Staged> keep_;  // keeps the buffers alive until the operation ends
  Blocking* blocking_;
  std::string op_;  // "allreduce of N f32 (group of P)": named if the wait times out
  bool done_ = false;
};

class MpiGroup : public ProcessGroup {
 public:
  MpiGroup(MPI_Comm comm, bool owns, Blocking* b) : comm_(comm), owns_(owns), blocking_(b) {
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
    for_chunks(s.host, [&](void* p, int n, MPI_Datatype type) {
      reqs.emplace_back();
      MPI_Iallreduce(MPI_IN_PLACE, p, n, type, mpi_op(op), comm_, &reqs.back());
    });
    std::vector<Staged> keep;
    keep.push_back(std::move(s));
    return work(std::move(reqs), std::move(keep), what("allreduce", t));
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
    return work(std::move(reqs), std::move(keep), what("reduce_scatter", in));
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
    return work(std::move(reqs), std::move(keep), what("allgather", in));
  }

  void broadcast(Tensor& t, int root) override {
    check_contiguous(t, "tensor", "broadcast");
    check_rank(root, "broadcast");
    Staged s(t);
    auto armed = blocking_->enter(what("broadcast", t) + " from rank " + std::to_string(root));
    for_chunks(s.host, [&](void* p, int n, MPI_Datatype type) { MPI_Bcast(p, n, type, root, comm_); });
    s.finish();
  }

  // Blocking: the non-blocking send, waited for (under the watchdog, as every wait).
  void send(const Tensor& t, int dst, int tag) override { send_async(t, dst, tag)->wait(); }

  std::unique_ptr<Work> send_async(const Tensor& t, int dst, int tag) override {
    check_contiguous(t, "tensor", "send");
    check_rank(dst, "send");
    Staged s(t);
    s.staged = false;  // nothing comes back
    std::vector<MPI_Request> reqs;
    for_chunks(s.host, [&](void* p, int n, MPI_Datatype type) {
      reqs.emplace_back();
      MPI_Isend(p, n, type, dst, tag, comm_, &reqs.back());
    });
    std::vector<Staged> keep;
    keep.push_back(std::move(s));
    return work(std::move(reqs), std::move(keep),
                what("send", t) + " to rank " + std::to_string(dst) + " tag " + std::to_string(tag));
  }

  void recv(Tensor& t, int src, int tag) override {
    check_contiguous(t, "tensor", "recv");
    check_rank(src, "recv");
    Staged s(t);
    auto armed =
        blocking_->enter(what("recv", t) + " from rank " + std::to_string(src) + " tag " + std::to_string(tag));
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

  void barrier() override {
    auto armed = blocking_->enter("barrier (group of " + std::to_string(size_) + ")");
    MPI_Barrier(comm_);
  }

  std::unique_ptr<ProcessGroup> split(int color, int key) override {
    MPI_Comm sub;
    {
      auto armed = blocking_->enter("split (group of " + std::to_string(size_) + ")");
      MPI_Comm_split(comm_, color, key, &sub);
    }
    return std::make_unique<MpiGroup>(sub, true, blocking_);
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

  // What the watchdog names: "allreduce of 1000 f32 (group of 2)".
  std::string what(const char* op, const Tensor& t) const {
    return std::string(op) + " of " + std::to_string(t.numel()) + " " + dtype_name(t.dtype()) + " (group of " +
           std::to_string(size_) + ")";
  }
  std::unique_ptr<Work> work(std::vector<MPI_Request> reqs, std::vector<Staged> keep, std::string op) {
    return std::make_unique<MpiWork>(std::move(reqs), std::move(keep), blocking_, std::move(op));
  }

  MPI_Comm comm_;
  bool owns_;
  Blocking* blocking_;
  int rank_ = 0, size_ = 1;
};

// Members in construction order: the watchdog outlives MPI_Finalize, which outlives the group.
struct World {
  explicit World(const WorldOptions& o) : blocking(o), runtime(blocking), group(MPI_COMM_WORLD, false, &blocking) {
    blocking.rank = group.rank();
    blocking.active = group.size() > 1;
    blocking.dog.set_rank(group.rank());
  }
  Blocking blocking;
  Runtime runtime;
  MpiGroup group;
};

World& the_world(const WorldOptions& o) {
  static World w(o);
  return w;
}

}  // namespace

ProcessGroup& init_world(const WorldOptions& options) {
  if (g_started) UNILLM_THROW(Error, "[dist] init_world: the world is already set up");
  g_started = true;
  return the_world(options).group;
}

ProcessGroup& world() {
  g_started = true;
  return the_world(WorldOptions{}).group;
}

bool mpi_started() { return g_started; }

void abort_world(int code) {
  if (!g_started || world().size() <= 1) return;
  MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace unillm::dist
