// The collective deadline (watchdog.h). One thread per process, idle on a condition variable
// until an operation is armed; arming and disarming cost a lock and a notify, small next to an
// MPI collective.
#include "dist/watchdog.h"

#include <unistd.h>

#include <cstdio>
#include <sstream>

namespace unillm::dist {
namespace {

void print_and_exit(const std::string& message) {
  std::fprintf(stderr, "unillm: error: %s\n", message.c_str());
  std::fflush(stderr);
  _exit(kWatchdogExitCode);  // the main thread is blocked inside MPI: no unwinding, no atexit
}

}  // namespace

Watchdog::Watchdog(double timeout_s, ExpiryAction on_expiry)
    : timeout_s_(timeout_s),
      on_expiry_(on_expiry ? std::move(on_expiry) : ExpiryAction(print_and_exit)) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::set_rank(int rank) {
  std::lock_guard<std::mutex> lk(mu_);
  rank_ = rank;
}

std::string Watchdog::message(const std::string& operation) const {
  std::ostringstream s;
  s << "rank " << (rank_ >= 0 ? std::to_string(rank_) : std::string("?")) << ": " << operation
    << " did not complete within " << timeout_s_
    << " s; another process has died or hung (Open MPI's lines name the process that ended "
       "first; if a step legitimately waits longer, raise --dist-timeout or UNILLM_DIST_TIMEOUT)";
  return s.str();
}

Watchdog::Scope Watchdog::arm(std::string operation) {
  if (timeout_s_ <= 0) return Scope(nullptr);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    armed_ = true;
    ++generation_;
    operation_ = std::move(operation);
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(timeout_s_));
  }
  cv_.notify_all();
  return Scope(this);
}

void Watchdog::disarm() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    armed_ = false;
  }
  // No notify: the thread wakes at the deadline, sees nothing armed (or a newer arming) and waits
  // on.
}

Watchdog::Scope::~Scope() {
  if (dog_) dog_->disarm();
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    if (!armed_) {
      cv_.wait(lk);
      continue;
    }
    const uint64_t gen = generation_;
    const auto deadline = deadline_;
    const bool moved_on =
        cv_.wait_until(lk, deadline, [&] { return stop_ || !armed_ || generation_ != gen; });
    if (moved_on) continue;
    const std::string msg = message(operation_);
    armed_ = false;
    lk.unlock();
    on_expiry_(msg);  // by default does not return
    lk.lock();
  }
}

}  // namespace unillm::dist
