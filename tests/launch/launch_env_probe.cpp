// Prints what resolve_launch_env() makes of this process's environment, one line:
//   launcher=Slurm rank=1 world=2 local_rank=1 local_world=2 store=vm:20016
// or `error: <message>` with exit status 2. tests/launch/test_real_launchers.sh starts it
// under the real srun, sbatch, salloc and mpirun.
#include "comm/launch_env.h"

#include <cstdio>
#include <stdexcept>

int main() {
  try {
    const auto e = zeroshard::comm::resolve_launch_env();
    std::printf("launcher=%s rank=%d world=%d local_rank=%d local_world=%d store=%s:%d\n",
                zeroshard::comm::launcher_name(e.launcher), e.rank, e.world_size, e.local_rank,
                e.local_world_size, e.store_host.c_str(), e.store_port);
    return 0;
  } catch (const std::invalid_argument& err) {
    std::printf("error: %s\n", err.what());
    return 2;
  }
}
