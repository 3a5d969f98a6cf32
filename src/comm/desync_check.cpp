// The desync check (CommOptions::check_desync): a Communicator decorator.
#include "zeroshard/comm.h"

#include <sstream>

namespace zeroshard {

namespace {

enum Op : int64_t { kAllGather = 1, kReduceScatter, kAllReduce, kBroadcast, kBarrier, kSplit };
constexpr int kFields = 6;  // op, seq, input numel, output numel, dtype, root

std::string describe(const int64_t* f) {
  static const char* names[] = {"?", "all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier", "split"};
  std::ostringstream out;
  out << names[(f[0] >= 1 && f[0] <= 6) ? f[0] : 0] << " #" << f[1];
  if (f[0] != kBarrier && f[0] != kSplit) {
    out << " (" << f[2] << " -> " << f[3] << " elements of " << c10::toString(static_cast<at::ScalarType>(f[4]));
    if (f[0] == kBroadcast) out << ", root " << f[5];
    out << ")";
  }
  return out.str();
}

class DesyncChecker : public Communicator {
 public:
  explicit DesyncChecker(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend_name() const override { return inner_->backend_name() + "+desync_check"; }
  CommStats stats() const override { return inner_->stats(); }

  WorkHandle all_gather_async(const at::Tensor& in, const at::Tensor& out) override {
    check(kAllGather, in, out, -1);
    return inner_->all_gather_async(in, out);
  }
  WorkHandle reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) override {
    check(kReduceScatter, in, out, -1);
    return inner_->reduce_scatter_async(in, out);
  }
  WorkHandle all_reduce_async(const at::Tensor& inout) override {
    check(kAllReduce, inout, inout, -1);
    return inner_->all_reduce_async(inout);
  }
  WorkHandle broadcast_async(const at::Tensor& inout, int root) override {
    check(kBroadcast, inout, inout, root);
    return inner_->broadcast_async(inout, root);
  }
  WorkHandle barrier_async() override {
    check(kBarrier, at::Tensor(), at::Tensor(), -1);
    return inner_->barrier_async();
  }
  std::shared_ptr<Communicator> split(int color) override {
    check(kSplit, at::Tensor(), at::Tensor(), -1);
    return std::make_shared<DesyncChecker>(inner_->split(color));
  }

 private:
  void check(Op op, const at::Tensor& in, const at::Tensor& out, int root) {
    const int64_t seq = seq_++;
    at::Tensor mine = at::tensor({static_cast<int64_t>(op), seq, in.defined() ? in.numel() : 0,
                                  out.defined() ? out.numel() : 0,
                                  static_cast<int64_t>(in.defined() ? in.scalar_type() : at::kByte),
                                  static_cast<int64_t>(root)},
                                 at::kLong);
    const int W = world_size();
    at::Tensor all = at::empty({W * kFields}, at::kLong);
    inner_->all_gather(mine, all);
    const int64_t* a = all.data_ptr<int64_t>();
    bool same = true;
    for (int r = 1; r < W; ++r) {
      for (int k = 0; k < kFields; ++k) same = same && a[r * kFields + k] == a[k];
    }
    if (same) return;
    std::ostringstream msg;
    msg << "desync at collective #" << seq << " (rank " << rank() << "): the ranks called different collectives:";
    for (int r = 0; r < W; ++r) msg << "\n  rank " << r << ": " << describe(a + r * kFields);
    throw CommError(msg.str());
  }

  std::shared_ptr<Communicator> inner_;
  int64_t seq_ = 0;
};

}  // namespace

std::shared_ptr<Communicator> with_desync_check(std::shared_ptr<Communicator> inner) {
  return std::make_shared<DesyncChecker>(std::move(inner));
}

}  // namespace zeroshard
