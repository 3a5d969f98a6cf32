// Gloo backend: collectives written as rings over Gloo's point-to-point unbound buffers.
// Why not gloo's own algorithms: ReduceScatterHalvingDoubling returned wrong slices at
// W = 3 on Debian's Gloo, and a ring fixes the summation order of every element for a
// given W, which is what makes the four sharding strategies bitwise identical.
#include "zeroshard/comm.h"

#include "comm/work_queue.h"

#include <gloo/context.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <sstream>

namespace zeroshard {
namespace {

// Adapts a c10d store (TCPStore / FileStore) to Gloo's rendezvous store interface.
class C10dStoreAdapter : public gloo::rendezvous::Store {
 public:
  C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->get(key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
};

// The local address other hosts reach us on: the source address the kernel picks for a
// route to MASTER_ADDR (a UDP connect sends nothing). Loopback jobs stay on 127.0.0.1.
std::string local_address_towards(const std::string& master_addr, int port) {
  if (const char* forced = std::getenv("ZEROSHARD_BIND_ADDR"); forced != nullptr && *forced) return forced;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(master_addr.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) {
    throw CommError("rendezvous: cannot resolve MASTER_ADDR '" + master_addr + "'");
  }
  std::string out = "127.0.0.1";
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      if (inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)) != nullptr) out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

// What the communicators of one job share: the rendezvous store and the TCP device. Groups
// made by split() get their own Gloo context (own connections) over the same two.
struct GlooShared {
  std::unique_ptr<C10dStoreAdapter> store;
  std::shared_ptr<gloo::transport::Device> device;
  std::chrono::milliseconds join_timeout{0};
  std::string where;  // for messages: how the ranks met
};

class GlooCommunicator : public Communicator {
 public:
  // The job's communicator: every rank of the job.
  GlooCommunicator(const RendezvousInfo& info, const CommOptions& options)
      : rank_(info.rank), world_(info.world_size), timeout_(options.timeout) {
    auto shared = std::make_shared<GlooShared>();
    shared->join_timeout = options.rendezvous_timeout;
    try {
      c10::intrusive_ptr<c10d::Store> store;
      if (!info.file_store_path.empty()) {
        shared->where = "file store " + info.file_store_path;
        store = c10::make_intrusive<c10d::FileStore>(info.file_store_path, world_);
      } else {
        shared->where = "TCP store " + info.master_addr + ":" + std::to_string(info.master_port);
        c10d::TCPStoreOptions opts;
        opts.port = static_cast<uint16_t>(info.master_port);
        opts.isServer = rank_ == 0;
        opts.numWorkers = world_;
        opts.waitWorkers = false;
        opts.timeout = shared->join_timeout;
        store = c10::make_intrusive<c10d::TCPStore>(info.master_addr, opts);
      }
      store->setTimeout(shared->join_timeout);
      shared->store = std::make_unique<C10dStoreAdapter>(store, shared->join_timeout);
      gloo::transport::tcp::attr attr;
      attr.hostname = info.file_store_path.empty()
                          ? local_address_towards(info.master_addr, info.master_port)
                          : std::string("127.0.0.1");
      if (const char* forced = std::getenv("ZEROSHARD_BIND_ADDR"); forced != nullptr && *forced) {
        attr.hostname = forced;
      }
      shared->device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw rendezvous_error(*shared, e);
    }
    shared_ = std::move(shared);
    for (int r = 0; r < world_; ++r) job_ranks_.push_back(r);
    connect("zeroshard");
  }

  // A group of a split: `job_ranks` are the job ranks of its members in group order.
  GlooCommunicator(std::shared_ptr<GlooShared> shared, std::vector<int> job_ranks, int rank,
                   std::chrono::milliseconds timeout, const std::string& prefix,
                   std::shared_ptr<comm_detail::WorkQueue> queue)
      : rank_(rank), world_(static_cast<int>(job_ranks.size())), timeout_(timeout), group_(true),
        shared_(std::move(shared)), job_ranks_(std::move(job_ranks)), queue_(std::move(queue)) {
    connect(prefix);
  }

  // The queue may outlive this communicator (it is shared with its groups): everything queued
  // so far, this communicator's collectives included, finishes before its context goes.
  ~GlooCommunicator() override {
    try {
      queue_->submit([] {})->wait();
    } catch (...) {
      // a failed queue runs nothing more
    }
  }

  std::shared_ptr<Communicator> split(int color) override {
    // Every rank learns every color (a collective over this communicator), then the members
    // of each color connect among themselves under a key prefix no other group uses.
    at::Tensor mine = at::full({1}, static_cast<int64_t>(color), at::kLong);
    at::Tensor all = at::empty({world_}, at::kLong);
    all_gather(mine, all);
    std::vector<int> members;
    int my_index = 0;
    for (int r = 0; r < world_; ++r) {
      if (all.data_ptr<int64_t>()[r] != color) continue;
      if (r == rank_) my_index = static_cast<int>(members.size());
      members.push_back(job_ranks_[static_cast<size_t>(r)]);
    }
    const std::string prefix = prefix_ + "/split" + std::to_string(splits_++) + "/color" + std::to_string(color);
    return std::make_shared<GlooCommunicator>(shared_, std::move(members), my_index, timeout_, prefix, queue_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend_name() const override { return "gloo"; }
  CommStats stats() const override {
    CommStats s;
    s.bytes_sent = bytes_sent_.load();
    s.bytes_received = bytes_received_.load();
    s.collectives = collectives_.load();
    return s;
  }

  WorkHandle all_gather_async(const at::Tensor& input, const at::Tensor& output) override {
    check_flat("all_gather", input);
    check_flat("all_gather", output);
    TORCH_CHECK(output.numel() == input.numel() * world_, "all_gather: output numel ", output.numel(),
                " != world_size ", world_, " * input numel ", input.numel());
    TORCH_CHECK(input.scalar_type() == output.scalar_type(), "all_gather: dtype mismatch");
    return submit("all_gather", [this, input, output] { ring_all_gather("all_gather", input, output); });
  }

  WorkHandle reduce_scatter_async(const at::Tensor& input, const at::Tensor& output) override {
    check_flat("reduce_scatter", input);
    check_flat("reduce_scatter", output);
    check_reducible("reduce_scatter", input);
    TORCH_CHECK(input.numel() == output.numel() * world_, "reduce_scatter: input numel ", input.numel(),
                " != world_size ", world_, " * output numel ", output.numel());
    TORCH_CHECK(input.scalar_type() == output.scalar_type(), "reduce_scatter: dtype mismatch");
    // The ring writes partial sums into the output while later hops still read the input.
    TORCH_CHECK(!output.is_alias_of(input), "reduce_scatter: the output shares storage with the input; pass a tensor of its own");
    return submit("reduce_scatter", [this, input, output] { ring_reduce_scatter("reduce_scatter", input, output); });
  }

  WorkHandle all_reduce_async(const at::Tensor& inout) override {
    check_flat("all_reduce", inout);
    check_reducible("all_reduce", inout);
    return submit("all_reduce", [this, inout] {
      // Ring all-reduce = reduce-scatter + all-gather over a copy padded to a multiple of W.
      const int64_t n = inout.numel();
      const int64_t chunk = (n + world_ - 1) / world_;
      at::Tensor padded = at::zeros({chunk * world_}, inout.options());
      padded.narrow(0, 0, n).copy_(inout.view({-1}));
      at::Tensor mine = at::empty({chunk}, inout.options());
      ring_reduce_scatter("all_reduce", padded, mine);
      ring_all_gather("all_reduce", mine, padded);
      inout.view({-1}).copy_(padded.narrow(0, 0, n));
    });
  }

  WorkHandle broadcast_async(const at::Tensor& inout, int root) override {
    check_flat("broadcast", inout);
    TORCH_CHECK(root >= 0 && root < world_, "broadcast: root ", root, " out of range for world size ", world_);
    return submit("broadcast", [this, inout, root] {
      const uint64_t slot = next_slot();
      const size_t bytes = inout.nbytes();
      if (bytes == 0) return;
      auto buf = context_->createUnboundBuffer(inout.data_ptr(), bytes);
      if (rank_ == root) {
        for (int peer = 0; peer < world_; ++peer) {
          if (peer == root) continue;
          buf->send(peer, slot);
          wait_send(*buf, "broadcast", peer);
          bytes_sent_ += static_cast<int64_t>(bytes);
        }
      } else {
        buf->recv(root, slot);
        wait_recv(*buf, "broadcast", root);
        bytes_received_ += static_cast<int64_t>(bytes);
      }
    });
  }

  WorkHandle barrier_async() override {
    return submit("barrier", [this] {
      at::Tensor token = at::zeros({world_}, at::kByte);
      ring_all_gather("barrier", token.narrow(0, rank_, 1).clone(), token);
    });
  }

 private:
  // Connects this context's ranks pairwise (all of them meet in the store under `prefix`).
  void connect(const std::string& prefix) {
    prefix_ = prefix;
    try {
      gloo::rendezvous::PrefixStore prefixed(prefix, *shared_->store);
      context_ = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
      context_->setTimeout(shared_->join_timeout);
      context_->connectFullMesh(prefixed, shared_->device);
      context_->setTimeout(timeout_);
    } catch (const std::exception& e) {
      throw rendezvous_error(*shared_, e);
    }
  }

  CommError rendezvous_error(const GlooShared& shared, const std::exception& e) const {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    return CommError("rendezvous failed on " + who() + " through " + shared.where + " (timeout " +
                     std::to_string(shared.join_timeout.count() / 1000) +
                     " s; are all ranks started, with the same MASTER_ADDR/MASTER_PORT?): " +
                     (c10_error ? c10_error->what_without_backtrace() : e.what()));
  }

  // "rank 3 of 4", or for a group "rank 3 (1 of group [2, 3])": messages name job ranks.
  std::string who() const { return describe(rank_) + (is_group() ? "" : " of " + std::to_string(world_)); }
  std::string describe(int group_rank) const {
    const int job = job_ranks_.empty() ? group_rank : job_ranks_[static_cast<size_t>(group_rank)];
    std::string s = "rank " + std::to_string(job);
    if (is_group()) {
      s += " (" + std::to_string(group_rank) + " of group [";
      for (size_t i = 0; i < job_ranks_.size(); ++i) s += (i ? ", " : "") + std::to_string(job_ranks_[i]);
      s += "])";
    }
    return s;
  }
  bool is_group() const { return group_; }

  static void check_flat(const char* op, const at::Tensor& t) {
    TORCH_CHECK(t.defined() && t.is_contiguous() && t.device().is_cpu(), op,
                ": tensors must be defined, contiguous CPU tensors (the gloo backend is CPU only)");
  }
  static void check_reducible(const char* op, const at::Tensor& t) {
    const auto s = t.scalar_type();
    TORCH_CHECK(s == at::kFloat || s == at::kDouble || s == at::kLong || s == at::kBFloat16, op,
                ": the gloo backend reduces float32, float64, int64 and bfloat16 tensors, got ", s);
  }

  // Gloo reports a lost peer from send()/recv() as well as from the waits: every error
  // leaves here as a CommError naming the operation, this rank and its ring neighbours.
  WorkHandle submit(const char* op, std::function<void()> fn) {
    return queue_->submit([this, op, fn = std::move(fn)] {
      try {
        fn();
      } catch (const CommError&) {
        throw;
      } catch (const std::exception& e) {
        std::ostringstream msg;
        msg << op << " #" << op_seq_ << " failed on " << who() << " (ring: sends to "
            << describe((rank_ + 1) % world_) << ", receives from " << describe((rank_ - 1 + world_) % world_)
            << "); a peer has exited or the network failed: " << e.what();
        throw CommError(msg.str());
      }
    });
  }

  uint64_t next_slot() {
    collectives_.fetch_add(1);
    return (++op_seq_) << 16;
  }

  void wait_recv(gloo::transport::UnboundBuffer& buf, const char* op, int peer) {
    wait_p2p(buf, op, peer, /*is_recv=*/true);
  }
  void wait_send(gloo::transport::UnboundBuffer& buf, const char* op, int peer) {
    wait_p2p(buf, op, peer, /*is_recv=*/false);
  }
  void wait_p2p(gloo::transport::UnboundBuffer& buf, const char* op, int peer, bool is_recv) {
    bool ok = false;
    std::string why;
    try {
      ok = is_recv ? buf.waitRecv(nullptr, timeout_) : buf.waitSend(nullptr, timeout_);
      if (!ok) why = "aborted";
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (ok) return;
    std::ostringstream msg;
    msg << op << " #" << op_seq_ << " failed on " << who() << " while "
        << (is_recv ? "receiving from " : "sending to ") << describe(peer) << " (timeout "
        << timeout_.count() / 1000.0 << " s; the peer may have exited or stalled): " << why;
    throw CommError(msg.str());
  }

  // Ring all-gather: in step s, rank r forwards chunk (r - s) to r+1 and receives chunk
  // (r - s - 1) from r-1, straight into the output.
  void ring_all_gather(const char* op, const at::Tensor& input, const at::Tensor& output) {
    const uint64_t slot = next_slot();
    const size_t chunk = input.nbytes();
    auto* out = static_cast<char*>(output.data_ptr());
    if (chunk != 0 && out + rank_ * chunk != input.data_ptr()) {
      std::memcpy(out + rank_ * chunk, input.data_ptr(), chunk);
    }
    if (world_ == 1 || chunk == 0) return;
    const int right = (rank_ + 1) % world_, left = (rank_ - 1 + world_) % world_;
    auto send_buf = context_->createUnboundBuffer(out, chunk * world_);
    auto recv_buf = context_->createUnboundBuffer(out, chunk * world_);
    for (int s = 0; s < world_ - 1; ++s) {
      const int send_idx = (rank_ - s + world_) % world_;
      const int recv_idx = (rank_ - s - 1 + world_) % world_;
      send_buf->send(right, slot + s, send_idx * chunk, chunk);
      recv_buf->recv(left, slot + s, recv_idx * chunk, chunk);
      wait_recv(*recv_buf, op, left);
      wait_send(*send_buf, op, right);
      bytes_sent_ += static_cast<int64_t>(chunk);
      bytes_received_ += static_cast<int64_t>(chunk);
    }
  }

  // Ring reduce-scatter: chunk c starts at rank c+1 and travels the ring, each rank adding
  // its own contribution (partial + local), and ends complete at rank c. The first hop's partial
  // is received straight into the output (nothing is sent from there yet); later hops (W > 2)
  // send the output while receiving, so their partial lands in a scratch buffer kept for the
  // next call: a buffer allocated per call is fresh memory that the kernel zero-fills page by
  // page as the socket writes it.
  void ring_reduce_scatter(const char* op, const at::Tensor& input, const at::Tensor& output) {
    const uint64_t slot = next_slot();
    const int64_t n = output.numel();
    const size_t chunk = output.nbytes();
    if (world_ == 1) {
      if (n) std::memcpy(output.data_ptr(), input.data_ptr(), chunk);
      return;
    }
    if (n == 0) return;
    const int right = (rank_ + 1) % world_, left = (rank_ - 1 + world_) % world_;
    if (world_ > 2 && (!scratch_.defined() || scratch_.nbytes() < chunk)) {
      scratch_ = at::empty({static_cast<int64_t>(chunk)}, at::kByte);
    }
    auto input_buf = context_->createUnboundBuffer(input.data_ptr(), chunk * world_);
    auto acc_buf = context_->createUnboundBuffer(output.data_ptr(), chunk);
    for (int s = 0; s < world_ - 1; ++s) {
      const int send_idx = (rank_ - s - 1 + 2 * world_) % world_;
      const int recv_idx = (rank_ - s - 2 + 2 * world_) % world_;
      const at::Tensor partial = s == 0 ? output : at::from_blob(scratch_.data_ptr(), {n}, output.options());
      auto recv_buf = context_->createUnboundBuffer(partial.data_ptr(), chunk);
      auto& sender = (s == 0) ? input_buf : acc_buf;
      sender->send(right, slot + s, s == 0 ? send_idx * chunk : 0, chunk);
      recv_buf->recv(left, slot + s, 0, chunk);
      wait_recv(*recv_buf, op, left);
      wait_send(*sender, op, right);
      bytes_sent_ += static_cast<int64_t>(chunk);
      bytes_received_ += static_cast<int64_t>(chunk);
      add_chunk(partial, input.narrow(0, recv_idx * n, n), output);
    }
  }

  // out = partial + local, elementwise (fixed association: the partial sum comes first).
  // bf16 adds in fp32 and rounds once per hop (what travels the ring is bf16).
  static void add_chunk(const at::Tensor& partial, const at::Tensor& local, const at::Tensor& out) {
    AT_DISPATCH_SWITCH(out.scalar_type(), "zeroshard_ring_add",
        AT_DISPATCH_CASE(at::kFloat, [&] { add_typed<float>(partial, local, out); })
        AT_DISPATCH_CASE(at::kDouble, [&] { add_typed<double>(partial, local, out); })
        AT_DISPATCH_CASE(at::kLong, [&] { add_typed<int64_t>(partial, local, out); })
        AT_DISPATCH_CASE(at::kBFloat16, [&] { add_typed<c10::BFloat16>(partial, local, out); }));
  }
  template <typename T>
  static void add_typed(const at::Tensor& partial, const at::Tensor& local, const at::Tensor& out) {
    const T* a = partial.data_ptr<T>();
    const T* b = local.data_ptr<T>();
    T* o = out.data_ptr<T>();
    const int64_t n = out.numel();
    if (a == o) {  // the first hop, received into the output: the same sum, written in place
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(o[i] + b[i]);
      return;
    }
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(a[i] + b[i]);
  }

  const int rank_;
  const int world_;
  const std::chrono::milliseconds timeout_;
  const bool group_ = false;  // made by split()
  std::shared_ptr<GlooShared> shared_;
  std::vector<int> job_ranks_;  // job rank of each rank of this communicator
  std::string prefix_;          // store keys of this context ("zeroshard" for the job's)
  int splits_ = 0;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  at::Tensor scratch_;  // ring_reduce_scatter's received partials after the first hop (comm thread only)
  uint64_t op_seq_ = 0;
  std::atomic<int64_t> bytes_sent_{0}, bytes_received_{0}, collectives_{0};
  // Declared last: when this holds the last reference, the thread is joined before the
  // context goes (and the destructor above flushes it otherwise).
  std::shared_ptr<comm_detail::WorkQueue> queue_ = std::make_shared<comm_detail::WorkQueue>();
};

}  // namespace

std::shared_ptr<Communicator> make_gloo_communicator(const RendezvousInfo& info, const CommOptions& options) {
  return std::make_shared<GlooCommunicator>(info, options);
}

}  // namespace zeroshard
