// A deadline on every blocking collective (`--dist-timeout`, docs/training.md "Launching"): a rank
// whose peer has died or hung would otherwise wait in MPI forever. A thread sleeps until the armed
// deadline; if the operation is still running then, it reports and ends the process, and mpirun
// then ends the whole job (a rank that exits non-zero aborts the others).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace unillm::dist {

// What happens when a deadline passes: by default print `message` as the cli's error line
// (`unillm: error: <message>`) and _exit(kWatchdogExitCode) — the thread cannot unwind the main
// thread, which is inside MPI. Tests pass their own.
using ExpiryAction = std::function<void(const std::string& message)>;
constexpr int kWatchdogExitCode = 3;

class Watchdog {
 public:
  // timeout_s <= 0 turns the watchdog off (arm() does nothing). The thread starts at the first arm.
  Watchdog(double timeout_s, ExpiryAction on_expiry = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void set_rank(int rank);  // the rank named in the message (-1: not known yet, "rank ?")
  double timeout_s() const { return timeout_s_; }

  // Disarms on destruction. Scopes do not nest: a blocking operation is never inside another.
  class Scope {
   public:
    Scope() : dog_(nullptr) {}  // arms nothing
    Scope(Scope&& o) noexcept : dog_(o.dog_) { o.dog_ = nullptr; }
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;

   private:
    friend class Watchdog;
    explicit Scope(Watchdog* d) : dog_(d) {}
    Watchdog* dog_;
  };
  // `operation` names what blocks ("allreduce wait", "barrier", …) in the message.
  [[nodiscard]] Scope arm(std::string operation);

  // The message for an expired `operation` (exposed for tests).
  std::string message(const std::string& operation) const;

 private:
  void disarm();
  void run();

  const double timeout_s_;
  ExpiryAction on_expiry_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false, stop_ = false;
  uint64_t generation_ = 0;  // which arming the thread is waiting on
  std::chrono::steady_clock::time_point deadline_;
  std::string operation_;
  int rank_ = -1;
  std::thread thread_;
};

}  // namespace unillm::dist
