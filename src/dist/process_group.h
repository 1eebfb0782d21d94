// The process group of parallel training (docs/ARCHITECTURE.md, "Parallel training"): the
// collectives data, tensor, pipeline and sharded parallelism are built from, over flat contiguous
// tensors. One implementation runs over Open MPI on the host (mpi_group.h); a device plugin's
// collectives implement the same interface. Errors name the operation and the tensors' sizes.
#pragma once

#include <memory>

#include "core/tensor.h"

namespace unillm::dist {

enum class ReduceOp { sum, max };

// A collective in flight (the *_async calls); wait() returns when its output is complete.
// Destroying an unwaited Work waits for it first: MPI's buffers must outlive the operation.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Lets the transport progress the operation without blocking; true once it is complete (wait()
  // then returns at once). Open MPI progresses non-blocking collectives only inside MPI calls, so
  // polling while computing is what lets communication overlap compute on a CPU. The default
  // reports nothing (wait() completes it).
  virtual bool test() { return false; }
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place over every rank's `t` (same numel and dtype everywhere). Reductions take f32, f64,
  // i32 and i64 (gradients are f32 in the arena); other dtypes are a DTypeError.
  virtual std::unique_ptr<Work> allreduce_async(Tensor& t, ReduceOp op) = 0;
  // in: size() · n elements; out: n, rank r receiving the reduction of block r.
  virtual std::unique_ptr<Work> reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  // in: n elements; out: size() · n, block r from rank r. Any dtype.
  virtual std::unique_ptr<Work> allgather_async(const Tensor& in, Tensor& out) = 0;

  void allreduce(Tensor& t, ReduceOp op = ReduceOp::sum) { allreduce_async(t, op)->wait(); }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(in, out, op)->wait();
  }
  void allgather(const Tensor& in, Tensor& out) { allgather_async(in, out)->wait(); }

  // `t` from rank `root` into every rank's `t` (any dtype).
  virtual void broadcast(Tensor& t, int root) = 0;
  // Point to point (pipeline stages): blocking, matched by (peer, tag).
  virtual void send(const Tensor& t, int dst, int tag) = 0;
  // A send that returns at once (a pipeline stage sends its output and goes on computing: two
  // neighbours that both send before they receive would wait for each other with blocking sends
  // larger than the transport's eager limit). `t` must stay unchanged until the Work is waited.
  virtual std::unique_ptr<Work> send_async(const Tensor& t, int dst, int tag) = 0;
  virtual void recv(Tensor& t, int src, int tag) = 0;
  virtual void barrier() = 0;

  // The sub-group of the ranks that pass the same `color`, ordered by `key` (MPI_Comm_split):
  // the mesh's tp, dp, pp and sharding groups.
  virtual std::unique_ptr<ProcessGroup> split(int color, int key) = 0;
};

}  // namespace unillm::dist
