// A pool of worker threads that lives as long as the process, for qmm.cpp.
//
// Splitting a product's output rows over threads used to spawn them per call; the pool
// wakes the same threads instead.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace swapless {

// Worker threads kept for the life of the process: a call wakes them instead of
// spawning threads (tens of microseconds each). One call uses the pool at a time; a
// concurrent call runs on its own thread alone.
class Pool {
 public:
  // Runs fn(0) .. fn(parts - 1), fn(0) on the calling thread; returns when all are done.
  void run(int parts, const std::function<void(int)>& fn) {
    std::unique_lock<std::mutex> caller(call_mu_, std::try_to_lock);
    if (!caller.owns_lock() || parts <= 1) {
      for (int t = 0; t < parts; ++t) {
        fn(t);
      }
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (static_cast<int>(workers_.size()) < parts - 1) {
        const int index = static_cast<int>(workers_.size()) + 1;
        workers_.emplace_back([this, index] { loop(index); });
      }
      job_ = &fn;
      parts_ = parts;
      pending_ = parts - 1;
      ++generation_;
    }
    wake_.notify_all();
    fn(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (index >= parts_) {
          continue;
        }
        job = job_;
      }
      (*job)(index);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) {
        done_.notify_one();
      }
    }
  }

  std::mutex call_mu_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int parts_ = 0;
  int pending_ = 0;
};

}  // namespace swapless
