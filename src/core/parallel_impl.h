// Template body of parallel_for (kept apart so parallel.h reads as a contract).
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <type_traits>

namespace unillm {
namespace detail {

// The team of run_with_team (core/thread_team.h): the calling thread posts each parallel_for
// as a job (run); the other threads take their chunks of it (serve).
class Team {
 public:
  explicit Team(int size) : size_(size) {}
  // Runs chunk 0 of [0, n) split into `chunks` on this thread, the others on the team, and
  // returns when all are done.
  void run(int64_t n, int64_t chunks, void (*call)(void*, int64_t, int64_t), void* ctx);
  void serve(int id);  // a team thread's loop until quit()
  void quit() { quit_.store(true, std::memory_order_release); }
  bool in_job() const { return in_job_; }
  int size() const { return size_; }
  void set_size(int n) { size_ = n; }

 private:
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> done_{0};
  std::atomic<bool> quit_{false};
  int size_;
  bool in_job_ = false;
  int64_t n_ = 0, chunks_ = 0;
  void (*call_)(void*, int64_t, int64_t) = nullptr;
  void* ctx_ = nullptr;
};

// The team held by this thread's run_with_team, or null.
Team* active_team();

}  // namespace detail

template <typename Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  if (detail::Team* team = detail::active_team(); team && !team->in_job()) {
    const int64_t g = std::max<int64_t>(grain, 1);
    if (team->size() <= 1 || n < 2 * g) {
      fn(int64_t{0}, n);
      return;
    }
    using F = std::remove_reference_t<Fn>;
    const int64_t chunks = std::min<int64_t>(team->size(), (n + g - 1) / g);
    team->run(n, chunks, [](void* c, int64_t b, int64_t e) { (*static_cast<F*>(c))(b, e); },
              const_cast<void*>(static_cast<const void*>(std::addressof(fn))));
    return;
  }
  int nt = num_threads();
  if (nt <= 1 || n < 2 * std::max<int64_t>(grain, 1) || in_parallel_region()) {
    fn(int64_t{0}, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(nt, (n + grain - 1) / std::max<int64_t>(grain, 1));
#pragma omp parallel for schedule(static, 1) num_threads(static_cast<int>(chunks))
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
    if (b < e) fn(b, e);
  }
}

}  // namespace unillm
