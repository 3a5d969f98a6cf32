// One communication thread per job: collectives run in issue order, so every rank executes
// the same sequence, while the caller's thread goes on computing. The groups made by split()
// share their parent's queue: collectives of different groups then run in the one program
// order every rank issues them in, which is what rules out cross-group deadlocks (rank a
// inside group X's collective waiting for rank b, which is inside group Y's waiting for a).
#pragma once

#include "zeroshard/comm.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace zeroshard::comm_detail {

class QueuedWork : public CommWork {
 public:
  void wait() override;
  bool completed() const override;
  void finish(std::exception_ptr error);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class WorkQueue {
 public:
  WorkQueue();
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues fn; after a failure every later op fails fast with the first error, since a
  // communicator whose peers disagree about the sequence cannot recover.
  WorkHandle submit(std::function<void()> fn);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<QueuedWork>>> queue_;
  bool stopping_ = false;
  std::exception_ptr broken_;
  std::thread thread_;
};

}  // namespace zeroshard::comm_detail
