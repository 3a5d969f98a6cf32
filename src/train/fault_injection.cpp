#include "train/fault_injection.h"

#include <csignal>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

namespace zeroshard::train {

void FaultInjector::before_step(int64_t step, Communicator& comm) const {
  if (here(step, FailKind::Exception)) {
    throw std::runtime_error("injected failure (debug.fail_at_step=" + std::to_string(step) + ") on rank " +
                             std::to_string(rank_));
  }
  if (here(step, FailKind::Desync)) comm.barrier();  // a collective the other ranks do not call
  if (here(step, FailKind::Sigkill)) {
    std::fprintf(stderr, "rank %d: injected SIGKILL at step %lld\n", rank_, static_cast<long long>(step));
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

at::Tensor FaultInjector::on_loss(int64_t step, const at::Tensor& loss) const {
  return here(step, FailKind::Nan) ? loss * std::numeric_limits<float>::quiet_NaN() : loss;
}

int FaultInjector::kill_rank_in_save(int64_t step) const {
  return debug_.fail_kind == FailKind::SigkillInSave && debug_.fail_at_step == step ? static_cast<int>(debug_.fail_rank)
                                                                                     : -1;
}

}  // namespace zeroshard::train
