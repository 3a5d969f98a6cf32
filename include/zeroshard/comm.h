// The one communication interface of zeroshard: collectives over flat, contiguous tensors.
// Backends are chosen at build time (today: Gloo over TCP for CPU tensors); the engine only
// sees this header.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

namespace zeroshard {

// A collective failed: timed out, or a peer went away. The message names the operation,
// this rank and the peer it was waiting for.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Handle to an asynchronous collective. wait() blocks until it completes and rethrows
// its error, if any. Handles may be waited on from any thread, any number of times.
class CommWork {
 public:
  virtual ~CommWork() = default;
  virtual void wait() = 0;
  virtual bool completed() const = 0;
};
using WorkHandle = std::shared_ptr<CommWork>;

// Bytes this rank moved over the network, for tests and reports.
struct CommStats {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t collectives = 0;
};

struct CommOptions {
  // Limit for each collective: past it the collective fails with a CommError.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Limit for all ranks to join (process start-up differs between ranks).
  std::chrono::milliseconds rendezvous_timeout{std::chrono::seconds(300)};
  // Debug: before every collective the ranks compare what they are about to call (see
  // with_desync_check); a mismatch fails naming the collective and each rank's call.
  bool check_desync = false;
};

// Where and how the ranks of one job meet. Filled from the torchrun/Slurm environment
// convention (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
// or with file_store_path set to rendezvous through a shared file instead of TCP.
struct RendezvousInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string file_store_path;  // non-empty: use a FileStore at this path

  // Reads the environment; throws std::invalid_argument naming the variable that is
  // missing or malformed. Returns a single-rank job when RANK is not set.
  static RendezvousInfo from_env();
  bool env_present() const { return world_size > 1 || !file_store_path.empty(); }
};

// All collectives are issued in the same order on every rank. Async forms are queued to
// one communication thread per job (shared by the groups of split()) and run in issue order; the synchronous forms
// are the async ones followed by wait(). Tensors must be contiguous and stay alive (and
// unmodified, for inputs) until the work completes.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend_name() const = 0;
  virtual CommStats stats() const { return {}; }

  // output (numel W*n) receives every rank's input (numel n), rank r's at [r*n, (r+1)*n).
  virtual WorkHandle all_gather_async(const at::Tensor& input, const at::Tensor& output) = 0;
  // A true reduce-scatter (sum): input has numel W*n, output (numel n) receives the sum over
  // ranks of input[r*n, (r+1)*n) for this rank r. Each rank sends and receives (W-1)*n
  // elements over a ring; the summation order of every element is fixed for a given W.
  virtual WorkHandle reduce_scatter_async(const at::Tensor& input, const at::Tensor& output) = 0;
  // Sum over ranks, in place; every rank gets the same bits.
  virtual WorkHandle all_reduce_async(const at::Tensor& inout) = 0;
  virtual WorkHandle broadcast_async(const at::Tensor& inout, int root) = 0;
  virtual WorkHandle barrier_async() = 0;

  // Splits this communicator into groups (MPI_Comm_split without a key): every rank calls
  // split with a color, and the ranks of one color form a new communicator, ranked in this
  // communicator's order. A collective over this communicator; each group then connects
  // among its own members. A group runs its collectives on its parent's communication thread,
  // in the order this rank issued them across all groups: ranks that issue the same program
  // order cannot deadlock across groups. Used for hybrid sharding (shard and replica groups).
  virtual std::shared_ptr<Communicator> split(int color) = 0;

  void all_gather(const at::Tensor& input, const at::Tensor& output) {
    all_gather_async(input, output)->wait();
  }
  void reduce_scatter(const at::Tensor& input, const at::Tensor& output) {
    reduce_scatter_async(input, output)->wait();
  }
  void all_reduce(const at::Tensor& inout) { all_reduce_async(inout)->wait(); }
  void broadcast(const at::Tensor& inout, int root) { broadcast_async(inout, root)->wait(); }
  void barrier() { barrier_async()->wait(); }
};

// A communicator for a job of one rank: every collective is a local copy.
std::shared_ptr<Communicator> make_local_communicator();

// Connects to the other ranks through Gloo's TCP transport (rendezvous via c10d TCPStore on
// MASTER_ADDR:MASTER_PORT, or a FileStore). Blocks until all ranks joined or the timeout.
std::shared_ptr<Communicator> make_gloo_communicator(const RendezvousInfo& info,
                                                     const CommOptions& options = {});

// Wraps a communicator so that before each collective every rank all-gathers a fingerprint
// of its call (operation, sequence number, element counts, dtype, root) and compares them:
// ranks that diverge (a collective skipped or added on one rank, another size) get a
// CommError naming the first mismatching collective and every rank's call, instead of a hang
// or silently mixed data. Costs one small all-gather per collective; issues collectives
// synchronously.
std::shared_ptr<Communicator> with_desync_check(std::shared_ptr<Communicator> inner);

// The backend for this job: local for one rank, Gloo otherwise (wrapped by
// with_desync_check when options.check_desync).
std::shared_ptr<Communicator> make_communicator(const RendezvousInfo& info,
                                                const CommOptions& options = {});

}  // namespace zeroshard
