// Counting collectives: volume by the ring formulas, time inside the blocking calls.
#include "dist/counting_group.h"

#include <chrono>

namespace unillm::dist {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Adds the time spent in wait() to the totals.
class CountedWork : public Work {
 public:
  CountedWork(std::unique_ptr<Work> inner, std::shared_ptr<CommStats> stats, double started)
      : inner_(std::move(inner)), stats_(std::move(stats)), started_(started) {}
  ~CountedWork() override {
    if (!done_) wait();
  }
  void wait() override {
    if (done_) return;
    const double t0 = now();
    inner_->wait();
    const double t1 = now();
    stats_->wait_seconds += t1 - t0;
    stats_->flight_wait_seconds += t1 - t0;
    complete(t1);
  }
  bool test() override {
    if (done_) return true;
    if (inner_->test()) complete(now());
    return done_;
  }

 private:
  void complete(double at) {
    stats_->flight_seconds += at - started_;
    done_ = true;
  }
  std::unique_ptr<Work> inner_;
  std::shared_ptr<CommStats> stats_;
  double started_;
  bool done_ = false;
};

}  // namespace

CountingGroup::CountingGroup(ProcessGroup& inner) : inner_(inner), stats_(std::make_shared<CommStats>()) {}

CountingGroup::CountingGroup(std::unique_ptr<ProcessGroup> owned, std::shared_ptr<CommStats> stats)
    : owned_(std::move(owned)), inner_(*owned_), stats_(std::move(stats)) {}

std::unique_ptr<Work> CountingGroup::counted(std::unique_ptr<Work> w, double bytes, double started) {
  stats_->calls += 1;
  stats_->wire_bytes += bytes;
  const double start_call = now() - started;  // starting it (MPI may progress it there)
  stats_->wait_seconds += start_call;
  stats_->flight_wait_seconds += start_call;  // not overlapped: the caller was inside MPI
  return std::make_unique<CountedWork>(std::move(w), stats_, started);
}

std::unique_ptr<Work> CountingGroup::allreduce_async(Tensor& t, ReduceOp op) {
  const double p = size(), t0 = now();
  return counted(inner_.allreduce_async(t, op), 2 * (p - 1) / p * static_cast<double>(t.nbytes()), t0);
}

std::unique_ptr<Work> CountingGroup::reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  const double p = size(), t0 = now();
  return counted(inner_.reduce_scatter_async(in, out, op), (p - 1) / p * static_cast<double>(in.nbytes()), t0);
}

std::unique_ptr<Work> CountingGroup::allgather_async(const Tensor& in, Tensor& out) {
  const double p = size(), t0 = now();
  return counted(inner_.allgather_async(in, out), (p - 1) / p * static_cast<double>(out.nbytes()), t0);
}

void CountingGroup::broadcast(Tensor& t, int root) {
  const double t0 = now();
  inner_.broadcast(t, root);
  stats_->calls += 1;
  stats_->wire_bytes += static_cast<double>(t.nbytes());
  stats_->wait_seconds += now() - t0;
}

void CountingGroup::send(const Tensor& t, int dst, int tag) {
  const double t0 = now();
  inner_.send(t, dst, tag);
  stats_->calls += 1;
  stats_->wire_bytes += static_cast<double>(t.nbytes());
  stats_->wait_seconds += now() - t0;
}

std::unique_ptr<Work> CountingGroup::send_async(const Tensor& t, int dst, int tag) {
  const double t0 = now();
  return counted(inner_.send_async(t, dst, tag), static_cast<double>(t.nbytes()), t0);
}

void CountingGroup::recv(Tensor& t, int src, int tag) {
  const double t0 = now();
  inner_.recv(t, src, tag);
  stats_->calls += 1;
  stats_->wire_bytes += static_cast<double>(t.nbytes());
  stats_->wait_seconds += now() - t0;
}

void CountingGroup::barrier() {
  const double t0 = now();
  inner_.barrier();
  stats_->calls += 1;
  stats_->wait_seconds += now() - t0;
}

std::unique_ptr<ProcessGroup> CountingGroup::split(int color, int key) {
  return std::unique_ptr<ProcessGroup>(new CountingGroup(inner_.split(color, key), stats_));
}

}  // namespace unillm::dist
