// resolve_launch_env on synthetic environments. The Slurm and Open MPI ones are the variables
// recorded from the real programs (Debian's slurm-wlm 22.05.8 with tests/launch/slurm_cluster.sh,
// openmpi-bin 4.1.4) on a host named "vm", trimmed to what could matter; see docs/launchers.md.
#include "comm/launch_env.h"

#include <gtest/gtest.h>

#include <set>

namespace zeroshard::comm {
namespace {

using Vars = std::map<std::string, std::string>;

Vars merge(Vars a, const Vars& b) {
  for (const auto& [k, v] : b) a[k] = v;
  return a;
}

// A host named `name` that knows only itself.
HostFacts host(const std::string& name) {
  return {name, [name](const std::string& h) { return h == name; }};
}

LaunchEnv resolve(const Vars& v, const std::string& on = "vm") { return resolve_launch_env(map_env(v), host(on)); }

// Expects a throw whose message contains every fragment.
void expect_error(const Vars& v, std::vector<std::string> fragments, const std::string& on = "vm") {
  try {
    const LaunchEnv e = resolve(v, on);
    ADD_FAILURE() << "expected an error, got " << e.describe();
  } catch (const std::invalid_argument& err) {
    for (const auto& f : fragments) EXPECT_NE(std::string(err.what()).find(f), std::string::npos) << err.what();
  }
}

// `srun -n 2 env`, task `procid` (job 1, step 0).
Vars srun_task(int procid) {
  return {{"SLURM_CLUSTER_NAME", "zstest"},  {"SLURM_CPUS_ON_NODE", "2"},       {"SLURM_GTIDS", "0,1"},
          {"SLURM_JOBID", "1"},              {"SLURM_JOB_ID", "1"},             {"SLURM_JOB_NODELIST", "vm"},
          {"SLURM_JOB_NUM_NODES", "1"},      {"SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"},
          {"SLURM_LOCALID", std::to_string(procid)},                            {"SLURM_NNODES", "1"},
          {"SLURM_NODEID", "0"},             {"SLURM_NODELIST", "vm"},          {"SLURM_NPROCS", "2"},
          {"SLURM_NTASKS", "2"},             {"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_STEPID", "0"},             {"SLURM_STEP_ID", "0"},            {"SLURM_STEP_NODELIST", "vm"},
          {"SLURM_STEP_NUM_NODES", "1"},     {"SLURM_STEP_NUM_TASKS", "2"},     {"SLURM_STEP_TASKS_PER_NODE", "2"},
          {"SLURM_SUBMIT_HOST", "vm"},       {"SLURM_TASKS_PER_NODE", "2"},     {"SLURM_TOPOLOGY_ADDR", "vm"}};
}

// The batch script of `sbatch -n 4` (job 1): SLURM_PROCID=0 but no SLURM_STEP_ID.
Vars sbatch_script(int ntasks) {
  Vars v = {{"SLURM_CPUS_ON_NODE", std::to_string(ntasks)}, {"SLURM_GTIDS", "0"}, {"SLURM_JOBID", "1"},
            {"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "vm"}, {"SLURM_JOB_NUM_NODES", "1"},
            {"SLURM_LOCALID", "0"}, {"SLURM_NNODES", "1"}, {"SLURM_NODEID", "0"}, {"SLURM_NODELIST", "vm"},
            {"SLURM_PROCID", "0"}, {"SLURM_TASKS_PER_NODE", std::to_string(ntasks)}, {"SLURM_TASK_PID", "10538"}};
  if (ntasks > 1) {  // sbatch without -n sets neither
    v["SLURM_NTASKS"] = std::to_string(ntasks);
    v["SLURM_NPROCS"] = std::to_string(ntasks);
  }
  return v;
}

// The shell of `salloc -n 2`: no SLURM_PROCID, no SLURM_STEP_ID.
const Vars kSallocShell = {{"SLURM_JOBID", "3"},          {"SLURM_JOB_ID", "3"},        {"SLURM_JOB_NODELIST", "vm"},
                           {"SLURM_JOB_NUM_NODES", "1"},  {"SLURM_NNODES", "1"},        {"SLURM_NODELIST", "vm"},
                           {"SLURM_NPROCS", "2"},         {"SLURM_NTASKS", "2"},        {"SLURM_TASKS_PER_NODE", "2"}};

// `mpirun -np 2 --oversubscribe --allow-run-as-root env`, rank `r`.
Vars mpirun_rank(int r) {
  return {{"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
          {"OMPI_COMM_WORLD_NODE_RANK", std::to_string(r)},
          {"OMPI_COMM_WORLD_RANK", std::to_string(r)},
          {"OMPI_COMM_WORLD_SIZE", "2"},
          {"OMPI_MCA_ess_base_jobid", "1210646529"},
          {"OMPI_MCA_ess_base_vpid", std::to_string(r)},
          {"OMPI_MCA_orte_ess_num_procs", "2"},
          {"OMPI_MCA_orte_hnp_uri", "1210646528.0;tcp://192.0.2.2:48457;tcp6://[fd00::2]:34551"},
          {"OMPI_MCA_orte_num_nodes", "1"},
          {"OMPI_UNIVERSE_SIZE", "2"},
          {"PMIX_NAMESPACE", "1210646529"},
          {"PMIX_RANK", std::to_string(r)},
          {"PMIX_HOSTNAME", "vm"}};
}

TEST(LaunchEnv, NoLauncherIsOneProcess) {
  const LaunchEnv e = resolve({{"HOME", "/root"}, {"MASTER_ADDR", "10.0.0.1"}});
  EXPECT_EQ(e.launcher, Launcher::none);
  EXPECT_FALSE(e.in_job());
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_world_size, 1);
}

TEST(LaunchEnv, ExplicitVariables) {
  const Vars v = {{"RANK", "3"},        {"WORLD_SIZE", "4"},         {"LOCAL_RANK", "1"},
                  {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29511"}};
  const LaunchEnv e = resolve(v);
  EXPECT_EQ(e.launcher, Launcher::explicit_env);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.store_host, "10.0.0.1");
  EXPECT_EQ(e.store_port, 29511);
  EXPECT_EQ(e.from.at("rank"), "RANK");
  // The local variables default to the global ones (the convention of the custom-model example).
  const LaunchEnv d = resolve({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 2);
  // A file store needs no MASTER_*.
  const LaunchEnv f = resolve({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"ZEROSHARD_STORE_FILE", "/shared/store"}});
  EXPECT_EQ(f.store_file, "/shared/store");
}

TEST(LaunchEnv, ExplicitVariablesMalformed) {
  expect_error({{"RANK", "0"}}, {"WORLD_SIZE is not"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}, {"MASTER_ADDR is not set"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, {"MASTER_PORT is not set"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
               {"MASTER_PORT=70000", "out of range"});
  expect_error({{"RANK", "two"}, {"WORLD_SIZE", "2"}}, {"RANK='two'"});
  expect_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
               {"rank 2", "world size 2"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "1"},
                {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
               {"local rank 1", "LOCAL_RANK"});
  // Half a torchrun environment is refused rather than run as one process.
  expect_error({{"WORLD_SIZE", "2"}}, {"WORLD_SIZE=2", "RANK is not"});
  expect_error({{"LOCAL_RANK", "0"}}, {"LOCAL_RANK=0", "RANK is not"});
}

TEST(LaunchEnv, SrunTasks) {
  std::set<int> ports;
  for (int r = 0; r < 2; ++r) {
    const LaunchEnv e = resolve(srun_task(r));
    EXPECT_EQ(e.launcher, Launcher::slurm);
    EXPECT_EQ(e.rank, r);
    EXPECT_EQ(e.world_size, 2);
    EXPECT_EQ(e.local_rank, r);
    EXPECT_EQ(e.local_world_size, 2);
    EXPECT_EQ(e.store_host, "vm");
    EXPECT_EQ(e.from.at("store_host"), "first host of SLURM_STEP_NODELIST");
    EXPECT_EQ(e.store_port, slurm_port(1, 0));
    ports.insert(e.store_port);
  }
  EXPECT_EQ(ports.size(), 1u);  // both tasks meet at one port
  // MASTER_ADDR / MASTER_PORT exported before srun win over the derived ones.
  const LaunchEnv m = resolve(merge(srun_task(0), {{"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29999"}}), "other");
  EXPECT_EQ(m.store_host, "10.1.2.3");
  EXPECT_EQ(m.store_port, 29999);
}

TEST(LaunchEnv, SrunRankZeroMustHostTheStore) {
  // Task 0 on a host that is not the first of the step's nodes (e.g. --distribution=arbitrary).
  expect_error(srun_task(0), {"rank 0 runs on 'elsewhere'", "'vm'", "MASTER_ADDR"}, "elsewhere");
  // Other ranks connect to it and need not be there.
  EXPECT_EQ(resolve(srun_task(1), "elsewhere").rank, 1);
}

TEST(LaunchEnv, SrunAcrossNodes) {
  // A synthetic 4-node step: node[01-03] run 2 tasks each, gpu5 runs 1; this is task 6, on gpu5.
  Vars v = {{"SLURM_JOB_ID", "4242"},        {"SLURM_STEP_ID", "3"},          {"SLURM_PROCID", "6"},
            {"SLURM_LOCALID", "0"},           {"SLURM_NODEID", "3"},            {"SLURM_NTASKS", "7"},
            {"SLURM_STEP_NUM_TASKS", "7"},    {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"},
            {"SLURM_TASKS_PER_NODE", "2(x4)"}, {"SLURM_STEP_NODELIST", "node[01-03],gpu5"},
            {"SLURM_JOB_NODELIST", "node[01-03,07],gpu5"}};
  const LaunchEnv e = resolve(v, "gpu5");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 7);
  EXPECT_EQ(e.local_world_size, 1);  // the step's per-node list, not the job's
  EXPECT_EQ(e.store_host, "node01");
  EXPECT_EQ(e.store_port, slurm_port(4242, 3));
  // The job's lists when the step's are absent.
  v.erase("SLURM_STEP_TASKS_PER_NODE");
  v.erase("SLURM_STEP_NODELIST");
  v["SLURM_TASKS_PER_NODE"] = "2(x3),1";
  v["SLURM_JOB_NODELIST"] = "node[07-09],gpu5";
  const LaunchEnv j = resolve(v, "gpu5");
  EXPECT_EQ(j.local_world_size, 1);
  EXPECT_EQ(j.store_host, "node07");
  EXPECT_EQ(j.from.at("store_host"), "first host of SLURM_JOB_NODELIST");
}

TEST(LaunchEnv, SrunInconsistent) {
  expect_error(merge(srun_task(1), {{"SLURM_STEP_TASKS_PER_NODE", "3"}}), {"adds up to 3", "SLURM_STEP_NUM_TASKS=2"});
  expect_error(merge(srun_task(1), {{"SLURM_NODEID", "1"}}), {"SLURM_NODEID=1", "1 node(s)"});
  expect_error(merge(srun_task(1), {{"SLURM_PROCID", "2"}}), {"rank 2", "SLURM_PROCID"});
  expect_error(merge(srun_task(1), {{"SLURM_LOCALID", "2"}}), {"local rank 2", "SLURM_LOCALID"});
  expect_error(merge(srun_task(1), {{"SLURM_STEP_TASKS_PER_NODE", "2(x"}}), {"2(x"});
  Vars no_counts = srun_task(1);
  no_counts.erase("SLURM_STEP_TASKS_PER_NODE");
  no_counts.erase("SLURM_TASKS_PER_NODE");
  expect_error(no_counts, {"SLURM_NTASKS_PER_NODE"});
  no_counts["SLURM_NTASKS_PER_NODE"] = "2";
  EXPECT_EQ(resolve(no_counts).local_world_size, 2);
}

TEST(LaunchEnv, SlurmOutsideAStepIsRefused) {
  expect_error(sbatch_script(4), {"Slurm job 1", "SLURM_NTASKS=4", "srun zeroshard", "--nproc"});
  expect_error(kSallocShell, {"Slurm job 3", "SLURM_NTASKS=2", "salloc"});
  // One task asked for: the batch script is the one process.
  EXPECT_EQ(resolve(sbatch_script(1)).launcher, Launcher::none);
}

TEST(LaunchEnv, MpirunRanks) {
  std::set<int> ports;
  for (int r = 0; r < 2; ++r) {
    const LaunchEnv e = resolve(mpirun_rank(r));
    EXPECT_EQ(e.launcher, Launcher::open_mpi);
    EXPECT_EQ(e.rank, r);
    EXPECT_EQ(e.world_size, 2);
    EXPECT_EQ(e.local_rank, r);
    EXPECT_EQ(e.local_world_size, 2);
    EXPECT_EQ(e.store_host, "127.0.0.1");  // all ranks on this host
    EXPECT_EQ(e.store_port, open_mpi_port(1210646529));
    ports.insert(e.store_port);
  }
  EXPECT_EQ(ports.size(), 1u);
}

TEST(LaunchEnv, MpirunInsideSbatchIgnoresTheBatchScriptsSlurmVariables) {
  // Recorded: ranks started by mpirun inside an sbatch -n 4 script carry the script's
  // SLURM_PROCID=0 and SLURM_NTASKS=4; Open MPI's variables describe the process.
  for (int r = 0; r < 2; ++r) {
    const LaunchEnv e = resolve(merge(sbatch_script(4), mpirun_rank(r)));
    EXPECT_EQ(e.launcher, Launcher::open_mpi);
    EXPECT_EQ(e.rank, r);
    EXPECT_EQ(e.world_size, 2);
  }
}

TEST(LaunchEnv, MpirunAcrossHosts) {
  // 4 ranks on 2 hosts: the store is on mpirun's host (the HNP URI), which rank 0 must be on.
  Vars v = merge(mpirun_rank(0), {{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_MCA_orte_num_nodes", "2"}});
  HostFacts hnp_host{"n1", [](const std::string& h) { return h == "192.0.2.2"; }};
  const LaunchEnv e = resolve_launch_env(map_env(v), hnp_host);
  EXPECT_EQ(e.store_host, "192.0.2.2");
  EXPECT_EQ(e.from.at("store_host"), "OMPI_MCA_orte_hnp_uri (the host of mpirun)");
  expect_error(v, {"rank 0 runs on 'n2'", "192.0.2.2", "mpirun -x MASTER_ADDR"}, "n2");
  EXPECT_EQ(resolve(merge(v, {{"MASTER_ADDR", "n2"}}), "n2").store_host, "n2");
  v.erase("OMPI_MCA_orte_hnp_uri");
  expect_error(v, {"span several hosts", "MASTER_ADDR"});
}

TEST(LaunchEnv, OpenMpiInconsistent) {
  Vars v = mpirun_rank(1);
  v.erase("OMPI_COMM_WORLD_LOCAL_SIZE");
  expect_error(v, {"OMPI_COMM_WORLD_LOCAL_SIZE is not"});
  Vars no_size = mpirun_rank(1);
  no_size.erase("OMPI_COMM_WORLD_SIZE");
  expect_error(no_size, {"OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not"});
  Vars no_id = mpirun_rank(1);
  no_id.erase("OMPI_MCA_ess_base_jobid");
  EXPECT_EQ(resolve(no_id).store_port, port_from_text("1210646529"));  // Open MPI 5 style
  no_id.erase("PMIX_NAMESPACE");
  expect_error(no_id, {"no job id", "MASTER_PORT"});
}

TEST(LaunchEnv, UnjoinableLaunchersAreRefused) {
  expect_error({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}, {"MPICH", "PMI_SIZE=2", "srun -n N"});
  expect_error({{"PMI_RANK", "0"}}, {"MPICH"});
  EXPECT_EQ(resolve({{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}}).launcher, Launcher::none);
  expect_error({{"MV2_COMM_WORLD_SIZE", "4"}, {"MV2_COMM_WORLD_RANK", "0"}}, {"MVAPICH2"});
  expect_error({{"PMIX_RANK", "0"}}, {"PMIx", "world size is unknown"});
}

TEST(LaunchEnv, TheInnermostLauncherWins) {
  // torchrun (or `zeroshard train --nproc 2`) inside an srun task: RANK describes this process.
  const Vars inner = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29400"}};
  const LaunchEnv e = resolve(merge(srun_task(0), inner));
  EXPECT_EQ(e.launcher, Launcher::explicit_env);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(resolve(merge(mpirun_rank(0), inner)).launcher, Launcher::explicit_env);
}

TEST(LaunchEnv, StoreFileWithAnyLauncher) {
  const LaunchEnv e = resolve(merge(srun_task(0), {{"ZEROSHARD_STORE_FILE", "/nfs/store"}}), "elsewhere");
  EXPECT_EQ(e.store_file, "/nfs/store");  // no store host to verify
}

TEST(LaunchEnv, CheckLocalLaunch) {
  EXPECT_NO_THROW(check_local_launch(resolve({}), 4));
  EXPECT_NO_THROW(check_local_launch(resolve(srun_task(1)), 2));  // joins
  EXPECT_NO_THROW(check_local_launch(resolve(srun_task(1)), 1));
  try {
    check_local_launch(resolve(srun_task(1)), 4);
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--nproc 4 inside a job of 2 processes started by Slurm"), std::string::npos)
        << e.what();
  }
}

TEST(Hostlist, Expands) {
  EXPECT_EQ(expand_hostlist("node[01-03,07],gpu5"),
            (std::vector<std::string>{"node01", "node02", "node03", "node07", "gpu5"}));
  EXPECT_EQ(expand_hostlist("vm"), (std::vector<std::string>{"vm"}));
  EXPECT_EQ(expand_hostlist("n[8-10]"), (std::vector<std::string>{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_hostlist("n[098-100]"), (std::vector<std::string>{"n098", "n099", "n100"}));
  EXPECT_EQ(expand_hostlist("r[1-2]-n[1,3]"), (std::vector<std::string>{"r1-n1", "r1-n3", "r2-n1", "r2-n3"}));
  EXPECT_EQ(first_host("node[01-03,07],gpu5"), "node01");
  EXPECT_EQ(first_host("gpu5,node[01-03]"), "gpu5");
  EXPECT_EQ(first_host("r[2-3]-n[05-06].ib"), "r2-n05.ib");
  for (const char* bad : {"node[", "node]", "n[3-1]", "n[a]", "a,,b", "n[[1]]", "n[]", ""}) {
    EXPECT_THROW(expand_hostlist(bad), std::invalid_argument) << bad;
    EXPECT_THROW(first_host(bad), std::invalid_argument) << bad;
  }
}

TEST(Hostlist, TasksPerNode) {
  EXPECT_EQ(expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_EQ(expand_tasks_per_node("1,3(x2)"), (std::vector<int>{1, 3, 3}));
  for (const char* bad : {"2(x)", "2(3)", "0", "x", "2(x0)", "", "2,"}) {
    EXPECT_THROW(expand_tasks_per_node(bad), std::invalid_argument) << bad;
  }
}

TEST(LaunchEnv, DerivedPortsStayOutOfTheEphemeralRangeAndApart) {
  std::set<int> seen;
  for (uint64_t job = 10000; job < 10625; ++job) {
    for (uint64_t step = 0; step < 16; ++step) {
      const int p = slurm_port(job, step);
      EXPECT_GE(p, 20000);
      EXPECT_LT(p, 30000);
      seen.insert(p);
    }
  }
  EXPECT_EQ(seen.size(), 625u * 16u);  // 625 neighbouring jobs x 16 steps: all distinct
  for (uint64_t family = 0; family < 65536; family += 97) {
    const int p = open_mpi_port((family << 16) | 1);
    EXPECT_GE(p, 20000);
    EXPECT_LT(p, 30000);
  }
  EXPECT_NE(open_mpi_port(1210646529), open_mpi_port(1210712065));  // two mpirun job families
}

TEST(LaunchEnv, ThisHostKnowsItself) {
  const HostFacts h = this_host();
  ASSERT_FALSE(h.hostname.empty());
  EXPECT_TRUE(h.is_local(h.hostname));
  EXPECT_TRUE(h.is_local("localhost"));
  EXPECT_TRUE(h.is_local("127.0.0.1"));
  EXPECT_FALSE(h.is_local("198.51.100.7"));  // TEST-NET-2: nobody's address
  EXPECT_FALSE(h.is_local("no-such-host.invalid"));
}

}  // namespace
}  // namespace zeroshard::comm
