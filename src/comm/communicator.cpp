#include "zeroshard/comm.h"

#include "comm/agree.h"
#include "comm/launch_env.h"
#include "comm/work_queue.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace zeroshard {
namespace comm_detail {

void QueuedWork::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool QueuedWork::completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void QueuedWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = error;
  }
  cv_.notify_all();
}

WorkQueue::WorkQueue() : thread_([this] { run(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

WorkHandle WorkQueue::submit(std::function<void()> fn) {
  auto work = std::make_shared<QueuedWork>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(fn), work);
  }
  cv_.notify_all();
  return work;
}

void WorkQueue::run() {
  for (;;) {
    std::pair<std::function<void()>, std::shared_ptr<QueuedWork>> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    if (broken_) {
      item.second->finish(broken_);
      continue;
    }
    try {
      item.first();
      item.second->finish(nullptr);
    } catch (...) {
      broken_ = std::current_exception();
      item.second->finish(broken_);
    }
  }
}

}  // namespace comm_detail

namespace {

class CompletedWork : public CommWork {
 public:
  void wait() override {}
  bool completed() const override { return true; }
};

// World of one: gathers and reductions are copies.
class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend_name() const override { return "local"; }

  WorkHandle all_gather_async(const at::Tensor& input, const at::Tensor& output) override {
    TORCH_CHECK(input.numel() == output.numel(), "all_gather: output numel ", output.numel(),
                " != world_size * input numel ", input.numel());
    if (input.data_ptr() != output.data_ptr()) output.copy_(input.view_as(output));
    return std::make_shared<CompletedWork>();
  }
  WorkHandle reduce_scatter_async(const at::Tensor& input, const at::Tensor& output) override {
    return all_gather_async(input, output);
  }
  WorkHandle all_reduce_async(const at::Tensor&) override { return std::make_shared<CompletedWork>(); }
  WorkHandle broadcast_async(const at::Tensor&, int root) override {
    TORCH_CHECK(root == 0, "broadcast: root ", root, " out of range for world size 1");
    return std::make_shared<CompletedWork>();
  }
  WorkHandle barrier_async() override { return std::make_shared<CompletedWork>(); }
  std::shared_ptr<Communicator> split(int) override { return std::make_shared<LocalCommunicator>(); }
};

}  // namespace

RendezvousInfo RendezvousInfo::from_env() {
  // Explicit variables, Open MPI, a Slurm step, or one process; several processes of a
  // launcher we cannot join are refused (src/comm/launch_env.h, docs/launchers.md).
  const comm::LaunchEnv e = comm::resolve_launch_env();
  RendezvousInfo info;
  info.rank = e.rank;
  info.world_size = e.world_size;
  info.local_rank = e.local_rank;
  info.local_world_size = e.local_world_size;
  info.master_addr = e.store_host;
  info.master_port = e.store_port;
  info.file_store_path = e.store_file;
  return info;
}

std::shared_ptr<Communicator> make_local_communicator() { return std::make_shared<LocalCommunicator>(); }

std::shared_ptr<Communicator> make_communicator(const RendezvousInfo& info, const CommOptions& options) {
  if (info.world_size == 1) return make_local_communicator();
  auto comm = make_gloo_communicator(info, options);
  return options.check_desync ? with_desync_check(std::move(comm)) : comm;
}

std::string broadcast_string(Communicator& comm, const std::string& mine, int root) {
  at::Tensor size = at::tensor({static_cast<int64_t>(mine.size())}, at::kLong);
  comm.broadcast(size, root);
  at::Tensor bytes = at::zeros({size.item<int64_t>()}, at::kByte);
  if (comm.rank() == root) std::memcpy(bytes.data_ptr<uint8_t>(), mine.data(), mine.size());
  comm.broadcast(bytes, root);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel()));
}

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine) {
  const int world = comm.world_size();
  at::Tensor sizes = at::empty({world}, at::kLong);
  comm.all_gather(at::tensor({static_cast<int64_t>(mine.size())}, at::kLong), sizes);
  const int64_t* n = sizes.data_ptr<int64_t>();
  const int64_t longest = std::max<int64_t>(1, *std::max_element(n, n + world));
  at::Tensor padded = at::zeros({longest}, at::kByte), all = at::empty({world * longest}, at::kByte);
  std::memcpy(padded.data_ptr<uint8_t>(), mine.data(), mine.size());
  comm.all_gather(padded, all);
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) {
    out.emplace_back(reinterpret_cast<const char*>(all.data_ptr<uint8_t>()) + r * longest, static_cast<size_t>(n[r]));
  }
  return out;
}

std::string first_error(Communicator& comm, const std::string& error) {
  const int world = comm.world_size();
  at::Tensor failed = at::empty({world}, at::kLong);
  comm.all_gather(at::tensor({static_cast<int64_t>(error.empty() ? 0 : 1)}, at::kLong), failed);
  for (int r = 0; r < world; ++r) {
    if (failed[r].item<int64_t>() == 0) continue;
    const std::string message = broadcast_string(comm, error, r);
    return comm.rank() == r ? message : message + " (rank " + std::to_string(r) + ")";
  }
  return {};
}

}  // namespace zeroshard
