// A ProcessGroup that forwards to another and counts what passes: the collectives called, their
// per-rank wire volume under the bandwidth-optimal (ring) algorithms, and the time spent waiting
// in them. Parallel training reports it per step ("communication: ...") so a layout's traffic can
// be checked against its formula (docs/training.md, "Several processes"), and the bench breaks a
// step into compute and exposed communication with it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dist/process_group.h"

namespace unillm::dist {

struct CommStats {
  int64_t calls = 0;
  // Bytes each rank sends (and receives) with ring algorithms over p ranks: allreduce
  // 2(p−1)/p·B, reduce-scatter and allgather (p−1)/p·B of the whole buffer B, broadcast B,
  // send/recv B.
  double wire_bytes = 0;
  double wait_seconds = 0;  // inside blocking collectives and Work::wait()
  // Non-blocking operations: from the start until they were seen complete (by test() or wait()).
  // flight − the waits inside them is the communication that overlapped other work.
  double flight_seconds = 0;
  double flight_wait_seconds = 0;  // the part of wait_seconds spent waiting for them
};

class CountingGroup : public ProcessGroup {
 public:
  explicit CountingGroup(ProcessGroup& inner);
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::unique_ptr<Work> allreduce_async(Tensor& t, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override;
  std::unique_ptr<Work> allgather_async(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& t, int root) override;
  void send(const Tensor& t, int dst, int tag) override;
  std::unique_ptr<Work> send_async(const Tensor& t, int dst, int tag) override;
  void recv(Tensor& t, int src, int tag) override;
  void barrier() override;
  // The sub-group, counted into the same totals.
  std::unique_ptr<ProcessGroup> split(int color, int key) override;

  const CommStats& stats() const { return *stats_; }

 private:
  CountingGroup(std::unique_ptr<ProcessGroup> owned, std::shared_ptr<CommStats> stats);
  std::unique_ptr<Work> counted(std::unique_ptr<Work> w, double bytes, double started_seconds);

  std::unique_ptr<ProcessGroup> owned_;
  ProcessGroup& inner_;
  std::shared_ptr<CommStats> stats_;
};

}  // namespace unillm::dist
