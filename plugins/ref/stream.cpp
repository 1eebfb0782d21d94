// Worker-thread streams and events (see stream.h).
#include "stream.h"

namespace unillm_ref {

Stream::Stream() : worker_([this] { run(); }) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  worker_.join();
}

void Stream::enqueue(std::function<std::string()> task, bool always) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({std::move(task), always});
  }
  work_.notify_one();
}

std::string Stream::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
  std::string e;
  e.swap(error_);
  return e;
}

void Stream::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ with nothing left
    auto task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool skip = !error_.empty() && !task.always;  // after a failure, only frees and marks
    lock.unlock();
    std::string e = skip ? std::string() : task.fn();
    lock.lock();
    if (!e.empty() && error_.empty()) error_ = e;
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

void Event::record(Stream& s) {
  uint64_t mark;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mark = ++recorded_;
  }
  s.enqueue([this, mark] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (mark > reached_) reached_ = mark;
    }
    cv_.notify_all();
    return std::string();
  }, /*always=*/true);
}

void Event::wait_on(Stream& s) {
  uint64_t mark;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mark = recorded_;
  }
  s.enqueue([this, mark] {
    wait_for(mark);
    return std::string();
  });
}

void Event::synchronize() {
  uint64_t mark;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mark = recorded_;
  }
  wait_for(mark);
}

void Event::wait_for(uint64_t mark) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return reached_ >= mark; });
}

}  // namespace unillm_ref
