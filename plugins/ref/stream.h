// The reference device's streams: a worker thread per stream runs queued work in order, so
// everything the host queues is asynchronous as on a real accelerator. A task that fails keeps
// its message; the stream then skips the rest and its next synchronize reports the failure.
// Events mark a point of a stream that another stream or the host waits for.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace unillm_ref {

class Stream {
 public:
  Stream();
  ~Stream();  // runs what is queued, then stops the worker
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // task returns "" on success, else the failure message. An `always` task (a free, an event
  // mark) runs even after a failure.
  void enqueue(std::function<std::string()> task, bool always = false);
  // Waits until everything queued so far has run; returns the first failure ("" if none) and
  // clears it.
  std::string synchronize();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable work_, idle_;
  struct Task {
    std::function<std::string()> fn;
    bool always;
  };
  std::deque<Task> queue_;
  bool busy_ = false, stop_ = false;
  std::string error_;
  std::thread worker_;
};

class Event {
 public:
  // Queues the mark on s; waits and synchronize() then refer to this mark.
  void record(Stream& s);
  // Queues on s a wait for the mark recorded last (nothing when never recorded).
  void wait_on(Stream& s);
  void synchronize();  // the host waits for the last mark

 private:
  void wait_for(uint64_t mark);
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0, reached_ = 0;
};

}  // namespace unillm_ref
