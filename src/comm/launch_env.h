// How this process was started, and where the ranks of its job meet: rank, world size, local
// rank, ranks on this host, store host and port, read from the variables a launcher sets.
// Torch-free (RendezvousInfo::from_env copies the result).
//
// The launcher that started this process directly wins, because outer launchers' variables are
// inherited and stay in the environment: torchrun or `zeroshard train --nproc` inside an srun
// task leaves the task's SLURM_* behind, and `mpirun` inside an sbatch script leaves the batch
// script's SLURM_PROCID=0 / SLURM_NTASKS in every rank (recorded on Slurm 22.05 + Open MPI
// 4.1.4, see docs/launchers.md). So, in order:
//
//  1. explicit  RANK set: RANK, WORLD_SIZE (required), LOCAL_RANK (default RANK),
//               LOCAL_WORLD_SIZE (default WORLD_SIZE), MASTER_ADDR and MASTER_PORT (required
//               when WORLD_SIZE > 1) -- torchrun, `zeroshard train --nproc`, a script.
//  2. Open MPI  OMPI_COMM_WORLD_SIZE set (only mpirun/orterun sets it, never srun):
//               OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE. Store host: MASTER_ADDR,
//               else 127.0.0.1 when all ranks are on this host (LOCAL_SIZE == SIZE), else the
//               host of mpirun (the tcp address in OMPI_MCA_orte_hnp_uri, Open MPI 4.x), which
//               rank 0 verifies is its own. Port: MASTER_PORT, else from OMPI_MCA_ess_base_jobid
//               (else from PMIX_NAMESPACE).
//  3. Slurm     inside a job step (SLURM_STEP_ID and SLURM_PROCID set: srun):
//               SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), SLURM_LOCALID, ranks
//               on this host = entry SLURM_NODEID of SLURM_STEP_TASKS_PER_NODE (else
//               SLURM_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE). Store host: MASTER_ADDR,
//               else the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST,
//               SLURM_NODELIST), which rank 0 verifies is its own. Port: MASTER_PORT, else
//               slurm_port(SLURM_JOB_ID, SLURM_STEP_ID).
//  4. refused   a launcher whose variables say the job has several processes that zeroshard
//               cannot join: a Slurm allocation outside a step with SLURM_NTASKS > 1 (sbatch
//               script, salloc shell), MPICH / Intel MPI (PMI_SIZE > 1, or PMI_RANK without
//               PMI_SIZE), MVAPICH2 (MV2_COMM_WORLD_SIZE > 1), a PMIx launcher (PMIX_RANK)
//               without OMPI_COMM_WORLD_*, and WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE set
//               without RANK. Copies must never train side by side in one run folder.
//  5. none      one process, rank 0 of 1.
//
// ZEROSHARD_STORE_FILE (any launcher) makes the ranks meet through that shared file instead
// of TCP. Every variable that was malformed, out of range or contradicting another is named in
// the std::invalid_argument thrown, with what to do.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zeroshard::comm {

enum class Launcher { none, explicit_env, open_mpi, slurm };
const char* launcher_name(Launcher l);  // "none", "explicit (RANK/WORLD_SIZE)", "Open MPI", "Slurm"

struct LaunchEnv {
  Launcher launcher = Launcher::none;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string store_host = "127.0.0.1";
  int store_port = 29500;
  std::string store_file;  // ZEROSHARD_STORE_FILE: rendezvous through this file instead
  // Where each field came from: "rank" -> "SLURM_PROCID", "store_port" -> "SLURM_JOB_ID=12,
  // SLURM_STEP_ID=0 (slurm_port)", ... (fields at their defaults are absent).
  std::map<std::string, std::string> from;

  bool in_job() const { return launcher != Launcher::none; }
  // One line for logs: "Slurm: rank 1 of 4 (local 1 of 2), store vm:20016 (...)".
  std::string describe() const;
};

// One environment variable's value; nullopt when unset or empty (a shell's `VAR=` unsets).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();
EnvLookup map_env(std::map<std::string, std::string> vars);

// What rank 0 needs to know about its host to verify a derived store host is its own.
struct HostFacts {
  std::string hostname;                            // gethostname()
  std::function<bool(const std::string&)> is_local;  // host name/address resolves to this host
};
HostFacts this_host();  // gethostname, and getaddrinfo compared with getifaddrs (+ loopback)

LaunchEnv resolve_launch_env(const EnvLookup& env, const HostFacts& host);
LaunchEnv resolve_launch_env();  // this process's environment, this host

// `zeroshard train --nproc N` starts N local ranks itself. Allowed when no launcher started
// several processes; inside a job of world size W only N == W (join it) is allowed. Throws
// naming the launcher and W otherwise.
void check_local_launch(const LaunchEnv& env, int nproc);

// Slurm hostlist expressions: "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5.
// Several brackets in one name ("r[1-2]-n[1-2]") expand as a product, the last bracket
// varying fastest. Zero padding follows the written bound. Throws on malformed text.
std::vector<std::string> expand_hostlist(const std::string& expr);
std::string first_host(const std::string& expr);  // without expanding the rest

// Slurm's compressed counts: "2(x3),1" -> {2, 2, 2, 1}. Throws on malformed text.
std::vector<int> expand_tasks_per_node(const std::string& expr);

// The derived store ports lie in [20000, 30000): below Linux's ephemeral range (32768-60999)
// so no outgoing connection holds them. Slurm: jobs whose ids differ by less than 625 and the
// first 16 steps of a job get distinct ports. Open MPI: ORTE's job family (a hash of mpirun's
// host and pid, upper 16 bits of the jobid) picks the port. Collisions are possible between
// unrelated jobs sharing a host; MASTER_PORT overrides.
int slurm_port(uint64_t job_id, uint64_t step_id);
int open_mpi_port(uint64_t ess_jobid);
int port_from_text(const std::string& id);  // FNV-1a of an opaque job id (PMIX_NAMESPACE)

}  // namespace zeroshard::comm
