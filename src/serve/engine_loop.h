// The engine thread of `unillm serve`: HTTP threads submit requests and read their events
// through a Channel; only the engine thread touches the Engine (and so every kernel and the
// OpenMP team). Cancellation and stop strings reach it as finish requests, applied before the
// next step, so a client that goes away frees its blocks within one step.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infer/engine.h"

namespace unillm::serve {

// The events of one HTTP request's engine requests (n of them for n choices).
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int64_t> ids;  // engine request ids, choice i = ids[i] (set before any event)
  std::deque<infer::StepOutput> events;
  int open = 0;  // engine requests not finished yet
  std::string error;  // set when the engine failed the requests
  // The choice index of an engine id; -1 when not ours.
  int choice(int64_t id) const;
};

struct LoopStats {
  int64_t running = 0, waiting = 0;
  int64_t blocks_used = 0, blocks_free = 0, blocks_cached = 0, num_blocks = 0;
  int64_t prefix_lookups = 0, prefix_hits = 0, preemptions = 0;
};

class EngineLoop {
 public:
  EngineLoop(infer::Engine& engine, int64_t max_waiting);
  ~EngineLoop();
  void start();
  // Aborts every request, reports their ends, and joins the engine thread.
  void stop();
  // Queues the requests of one HTTP request; nullptr when the waiting queue is full (503) or the
  // loop is stopping. Throws ConfigError (a 400) when the engine would refuse one; then none of
  // them is queued.
  std::shared_ptr<Channel> submit(std::vector<infer::Request> requests);
  // Ends engine request `id` before the next step (stop string matched, client gone).
  void finish(int64_t id, infer::FinishReason reason);
  // Ends every open request of the channel.
  void cancel(const std::shared_ptr<Channel>& ch);
  LoopStats stats() const;

 private:
  void run();
  void publish(const std::vector<infer::StepOutput>& out);

  infer::Engine& engine_;
  int64_t max_waiting_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Incoming {
    std::vector<infer::Request> requests;
    std::shared_ptr<Channel> channel;
  };
  std::deque<Incoming> incoming_;  // validated, not yet given to the engine
  std::vector<std::shared_ptr<Channel>> cancels_;
  std::vector<std::pair<int64_t, infer::FinishReason>> finishes_;
  std::map<int64_t, std::shared_ptr<Channel>> channels_;  // engine id → channel
  bool stopping_ = false;
  LoopStats stats_;
  std::thread thread_;
};

}  // namespace unillm::serve
