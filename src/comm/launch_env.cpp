#include "comm/launch_env.h"

#include "util/text.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

extern char** environ;

namespace zeroshard::comm {
namespace {

uint64_t parse_u64(const std::string& what, const std::string& v) {
  if (!util::all_digits(v) || v.size() > 19) {
    throw std::invalid_argument(what + "='" + v + "' is not a non-negative integer");
  }
  return std::stoull(v);
}

int parse_int(const std::string& name, const std::string& v, int lo, int hi) {
  const uint64_t x = parse_u64(name, v);
  if (x < static_cast<uint64_t>(lo) || x > static_cast<uint64_t>(hi)) {
    throw std::invalid_argument(name + "=" + v + " is out of range [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  }
  return static_cast<int>(x);
}

std::string opt_or(const std::optional<std::string>& v, const std::string& fallback) { return v ? *v : fallback; }

// FNV-1a, 64 bit.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// "1210646528.0;tcp://192.0.2.2:48457;tcp6://[fd00::2]:34551" -> "192.0.2.2" (the first
// address of the first tcp:// entry; ORTE lists several interfaces separated by commas).
std::optional<std::string> hnp_host(const std::string& uri) {
  const auto at = uri.find("tcp://");
  if (at == std::string::npos) return std::nullopt;
  std::string rest = uri.substr(at + 6);
  rest = rest.substr(0, rest.find(';'));
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string hosts = rest.substr(0, colon);
  std::string first = hosts.substr(0, hosts.find(','));
  if (first.empty()) return std::nullopt;
  return first;
}

// MASTER_ADDR / MASTER_PORT over a launcher's derived values; records where each came from.
bool take_master_addr(const EnvLookup& env, LaunchEnv& e) {
  if (auto a = env("MASTER_ADDR")) {
    e.store_host = *a;
    e.from["store_host"] = "MASTER_ADDR";
    return true;
  }
  return false;
}

bool take_master_port(const EnvLookup& env, LaunchEnv& e) {
  if (auto p = env("MASTER_PORT")) {
    e.store_port = parse_int("MASTER_PORT", *p, 1, 65535);
    e.from["store_port"] = "MASTER_PORT";
    return true;
  }
  return false;
}

// Rank 0 hosts the store: a store host we derived (not one the user gave) must be its own.
void verify_store_host_is_rank0s(const LaunchEnv& e, const HostFacts& host, const std::string& hint) {
  if (e.rank != 0 || e.world_size == 1 || !e.store_file.empty()) return;
  // Given by the user (MASTER_ADDR), or loopback because every rank is on this host.
  if (!e.from.count("store_host") || e.from.at("store_host") == "MASTER_ADDR" || e.store_host == "127.0.0.1") return;
  if (host.is_local && host.is_local(e.store_host)) return;
  throw std::invalid_argument(std::string(launcher_name(e.launcher)) + ": rank 0 runs on '" + host.hostname +
                              "', but the store host derived from " + e.from.at("store_host") + " is '" +
                              e.store_host + "', which is not this host: the other ranks would wait for a store " +
                              "nobody serves. " + hint);
}

void finish(const EnvLookup& env, LaunchEnv& e) {
  if (e.world_size < 1 || e.rank < 0 || e.rank >= e.world_size) {
    throw std::invalid_argument(std::string(launcher_name(e.launcher)) + ": rank " + std::to_string(e.rank) + " (" +
                                e.from["rank"] + ") is out of range for world size " + std::to_string(e.world_size) +
                                " (" + e.from["world_size"] + ")");
  }
  if (e.local_world_size < 1 || e.local_world_size > e.world_size || e.local_rank < 0 ||
      e.local_rank >= e.local_world_size) {
    throw std::invalid_argument(std::string(launcher_name(e.launcher)) + ": local rank " +
                                std::to_string(e.local_rank) + " (" + e.from["local_rank"] + ") of " +
                                std::to_string(e.local_world_size) + " on this host (" + e.from["local_world_size"] +
                                ") does not fit a world of " + std::to_string(e.world_size));
  }
  if (auto f = env("ZEROSHARD_STORE_FILE")) {
    e.store_file = *f;
    e.from["store_file"] = "ZEROSHARD_STORE_FILE";
  }
}

LaunchEnv from_explicit(const EnvLookup& env) {
  LaunchEnv e;
  e.launcher = Launcher::explicit_env;
  e.rank = parse_int("RANK", *env("RANK"), 0, std::numeric_limits<int>::max());
  e.from["rank"] = "RANK";
  const auto ws = env("WORLD_SIZE");
  if (!ws) throw std::invalid_argument("RANK is set but WORLD_SIZE is not: set both (and MASTER_ADDR, MASTER_PORT)");
  e.world_size = parse_int("WORLD_SIZE", *ws, 1, std::numeric_limits<int>::max());
  e.from["world_size"] = "WORLD_SIZE";
  if (auto lr = env("LOCAL_RANK")) {
    e.local_rank = parse_int("LOCAL_RANK", *lr, 0, std::numeric_limits<int>::max());
    e.from["local_rank"] = "LOCAL_RANK";
  } else {
    e.local_rank = e.rank;
    e.from["local_rank"] = "RANK (LOCAL_RANK unset)";
  }
  if (auto lw = env("LOCAL_WORLD_SIZE")) {
    e.local_world_size = parse_int("LOCAL_WORLD_SIZE", *lw, 1, std::numeric_limits<int>::max());
    e.from["local_world_size"] = "LOCAL_WORLD_SIZE";
  } else {
    e.local_world_size = e.world_size;
    e.from["local_world_size"] = "WORLD_SIZE (LOCAL_WORLD_SIZE unset)";
  }
  const bool file = env("ZEROSHARD_STORE_FILE").has_value();
  if (!take_master_addr(env, e) && e.world_size > 1 && !file) {
    throw std::invalid_argument("WORLD_SIZE=" + std::to_string(e.world_size) +
                                " but MASTER_ADDR is not set: set it to the host of rank 0");
  }
  if (!take_master_port(env, e) && e.world_size > 1 && !file) {
    throw std::invalid_argument("WORLD_SIZE=" + std::to_string(e.world_size) +
                                " but MASTER_PORT is not set: set it to a free TCP port on the host of rank 0");
  }
  finish(env, e);
  return e;
}

LaunchEnv from_open_mpi(const EnvLookup& env, const HostFacts& host) {
  LaunchEnv e;
  e.launcher = Launcher::open_mpi;
  auto need = [&](const std::string& name) {
    auto v = env(name);
    if (!v) {
      throw std::invalid_argument("Open MPI: OMPI_COMM_WORLD_SIZE is set but " + name +
                                  " is not; these variables come from mpirun together, so this environment is "
                                  "inconsistent (was OMPI_COMM_WORLD_SIZE exported by hand?)");
    }
    return *v;
  };
  const int max = std::numeric_limits<int>::max();
  e.world_size = parse_int("OMPI_COMM_WORLD_SIZE", need("OMPI_COMM_WORLD_SIZE"), 1, max);
  e.rank = parse_int("OMPI_COMM_WORLD_RANK", need("OMPI_COMM_WORLD_RANK"), 0, max);
  e.local_rank = parse_int("OMPI_COMM_WORLD_LOCAL_RANK", need("OMPI_COMM_WORLD_LOCAL_RANK"), 0, max);
  e.local_world_size = parse_int("OMPI_COMM_WORLD_LOCAL_SIZE", need("OMPI_COMM_WORLD_LOCAL_SIZE"), 1, max);
  e.from = {{"rank", "OMPI_COMM_WORLD_RANK"},
            {"world_size", "OMPI_COMM_WORLD_SIZE"},
            {"local_rank", "OMPI_COMM_WORLD_LOCAL_RANK"},
            {"local_world_size", "OMPI_COMM_WORLD_LOCAL_SIZE"}};
  finish(env, e);
  if (!take_master_addr(env, e)) {
    const auto uri = env("OMPI_MCA_orte_hnp_uri");
    const auto hnp = uri ? hnp_host(*uri) : std::nullopt;
    if (e.local_world_size == e.world_size) {
      e.store_host = "127.0.0.1";
      e.from["store_host"] = "OMPI_COMM_WORLD_LOCAL_SIZE == OMPI_COMM_WORLD_SIZE (all ranks on this host)";
    } else if (hnp) {
      e.store_host = *hnp;
      e.from["store_host"] = "OMPI_MCA_orte_hnp_uri (the host of mpirun)";
    } else if (e.store_file.empty()) {
      throw std::invalid_argument("Open MPI: the " + std::to_string(e.world_size) +
                                  " ranks span several hosts and no launching host is known (no "
                                  "OMPI_MCA_orte_hnp_uri with a tcp:// address): pass the host of rank 0, e.g. "
                                  "`mpirun -x MASTER_ADDR=<host of rank 0> ...`");
    }
  }
  if (!take_master_port(env, e)) {
    if (auto jobid = env("OMPI_MCA_ess_base_jobid")) {
      e.store_port = open_mpi_port(parse_u64("OMPI_MCA_ess_base_jobid", *jobid));
      e.from["store_port"] = "OMPI_MCA_ess_base_jobid=" + *jobid + " (open_mpi_port)";
    } else if (auto ns = env("PMIX_NAMESPACE")) {
      e.store_port = port_from_text(*ns);
      e.from["store_port"] = "PMIX_NAMESPACE=" + *ns + " (port_from_text)";
    } else if (e.store_file.empty() && e.world_size > 1) {
      throw std::invalid_argument("Open MPI: no job id to derive a store port from (neither OMPI_MCA_ess_base_jobid "
                                  "nor PMIX_NAMESPACE is set): pass one, e.g. `mpirun -x MASTER_PORT=29500 ...`");
    }
  }
  verify_store_host_is_rank0s(e, host,
                              "Place rank 0 on the host that runs mpirun, or pass its host: `mpirun -x "
                              "MASTER_ADDR=<host of rank 0> ...`.");
  return e;
}

LaunchEnv from_slurm_step(const EnvLookup& env, const HostFacts& host) {
  LaunchEnv e;
  e.launcher = Launcher::slurm;
  const int max = std::numeric_limits<int>::max();
  auto need = [&](const std::string& name) {
    auto v = env(name);
    if (!v) {
      throw std::invalid_argument("Slurm: this process is an srun task (SLURM_STEP_ID is set) but " + name +
                                  " is not: the environment is inconsistent");
    }
    return *v;
  };
  e.rank = parse_int("SLURM_PROCID", need("SLURM_PROCID"), 0, max);
  e.from["rank"] = "SLURM_PROCID";
  if (auto n = env("SLURM_STEP_NUM_TASKS")) {
    e.world_size = parse_int("SLURM_STEP_NUM_TASKS", *n, 1, max);
    e.from["world_size"] = "SLURM_STEP_NUM_TASKS";
  } else {
    e.world_size = parse_int("SLURM_NTASKS", need("SLURM_NTASKS"), 1, max);
    e.from["world_size"] = "SLURM_NTASKS";
  }
  e.local_rank = parse_int("SLURM_LOCALID", need("SLURM_LOCALID"), 0, max);
  e.from["local_rank"] = "SLURM_LOCALID";
  std::string per_node_var;
  std::optional<std::string> per_node;
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if ((per_node = env(name))) {
      per_node_var = name;
      break;
    }
  }
  if (per_node) {
    const std::vector<int> counts = expand_tasks_per_node(*per_node);
    const int node = parse_int("SLURM_NODEID", need("SLURM_NODEID"), 0, max);
    if (node >= static_cast<int>(counts.size())) {
      throw std::invalid_argument("Slurm: SLURM_NODEID=" + std::to_string(node) + " but " + per_node_var + "=" +
                                  *per_node + " lists " + std::to_string(counts.size()) + " node(s)");
    }
    int64_t total = 0;
    for (int c : counts) total += c;
    if (total != e.world_size) {
      throw std::invalid_argument("Slurm: " + per_node_var + "=" + *per_node + " adds up to " + std::to_string(total) +
                                  " tasks but " + e.from["world_size"] + "=" + std::to_string(e.world_size));
    }
    e.local_world_size = counts[node];
    e.from["local_world_size"] = per_node_var + " at SLURM_NODEID";
  } else if (auto n = env("SLURM_NTASKS_PER_NODE")) {
    e.local_world_size = parse_int("SLURM_NTASKS_PER_NODE", *n, 1, max);
    e.from["local_world_size"] = "SLURM_NTASKS_PER_NODE";
  } else {
    throw std::invalid_argument("Slurm: none of SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE, "
                                "SLURM_NTASKS_PER_NODE is set: cannot tell how many ranks share this host");
  }
  finish(env, e);
  if (!take_master_addr(env, e)) {
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      if (auto list = env(name)) {
        e.store_host = first_host(*list);
        e.from["store_host"] = std::string("first host of ") + name;
        break;
      }
    }
    if (!e.from.count("store_host") && e.world_size > 1 && e.store_file.empty()) {
      throw std::invalid_argument("Slurm: no SLURM_STEP_NODELIST / SLURM_JOB_NODELIST to find the host of rank 0: "
                                  "set MASTER_ADDR");
    }
  }
  if (!take_master_port(env, e)) {
    const auto job = env("SLURM_JOB_ID") ? env("SLURM_JOB_ID") : env("SLURM_JOBID");
    if (job) {
      const uint64_t job_id = parse_u64("SLURM_JOB_ID", *job);
      const std::string step_text = opt_or(env("SLURM_STEP_ID"), opt_or(env("SLURM_STEPID"), "0"));
      const uint64_t step = parse_u64("SLURM_STEP_ID", step_text);
      e.store_port = slurm_port(job_id, step);
      e.from["store_port"] = "SLURM_JOB_ID=" + *job + ", SLURM_STEP_ID=" + step_text + " (slurm_port)";
    } else if (e.world_size > 1 && e.store_file.empty()) {
      throw std::invalid_argument("Slurm: SLURM_JOB_ID is not set, so no store port can be derived: set MASTER_PORT");
    }
  }
  verify_store_host_is_rank0s(e, host,
                              "Use srun's default block distribution (task 0 on the first node of the step), "
                              "or export MASTER_ADDR=<host of task 0> before srun.");
  return e;
}

// Launchers we recognise but cannot join: refuse when they say there are several processes.
void refuse_unjoinable(const EnvLookup& env) {
  const std::string alternatives =
      "Start zeroshard with `srun -n N zeroshard ...`, `mpirun -np N zeroshard ...` (Open MPI), torchrun-style "
      "variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or `zeroshard train --nproc N` on one host.";
  for (const char* name : {"WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
    if (auto v = env(name)) {
      throw std::invalid_argument(std::string(name) + "=" + *v +
                                  " is set but RANK is not: this looks like a partial torchrun-style environment; "
                                  "set RANK as well (or unset " + name + ")");
    }
  }
  if (env("OMPI_COMM_WORLD_RANK") || env("OMPI_COMM_WORLD_LOCAL_RANK")) {
    throw std::invalid_argument("Open MPI: OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not: the "
                                "environment is inconsistent");
  }
  if (env("SLURM_JOB_ID") || env("SLURM_JOBID")) {
    const std::string job = opt_or(env("SLURM_JOB_ID"), opt_or(env("SLURM_JOBID"), ""));
    for (const char* name : {"SLURM_NTASKS", "SLURM_NPROCS"}) {
      const auto v = env(name);
      if (v && parse_u64(name, *v) > 1) {
        throw std::invalid_argument(
            std::string("Slurm job ") + job + " has " + name + "=" + *v +
            " tasks, but this process is not one of them (no SLURM_STEP_ID: it is the batch script or an salloc "
            "shell), and running it alone would ignore the other tasks. Start the ranks with `srun zeroshard "
            "train ...` inside the job (srun takes the task count from the allocation), or for ranks on this "
            "node only submit with --ntasks=1 and run `zeroshard train --nproc N`.");
      }
    }
  }
  const auto pmi_size = env("PMI_SIZE");
  if ((pmi_size && parse_u64("PMI_SIZE", *pmi_size) > 1) || (env("PMI_RANK") && !pmi_size)) {
    throw std::invalid_argument("this process was started by an MPICH / Intel MPI (Hydra) launcher (PMI_RANK=" +
                                opt_or(env("PMI_RANK"), "?") + ", PMI_SIZE=" + opt_or(pmi_size, "?") +
                                "), which zeroshard cannot join. " + alternatives);
  }
  if (auto mv = env("MV2_COMM_WORLD_SIZE"); mv && parse_u64("MV2_COMM_WORLD_SIZE", *mv) > 1) {
    throw std::invalid_argument("this process was started by MVAPICH2 (MV2_COMM_WORLD_SIZE=" + *mv +
                                "), which zeroshard cannot join. " + alternatives);
  }
  if (auto pr = env("PMIX_RANK")) {
    throw std::invalid_argument("this process was started by a PMIx launcher (PMIX_RANK=" + *pr +
                                ") that sets neither OMPI_COMM_WORLD_* nor SLURM_* task variables, so the world "
                                "size is unknown. " + alternatives);
  }
}

}  // namespace

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::none: return "none";
    case Launcher::explicit_env: return "explicit (RANK/WORLD_SIZE)";
    case Launcher::open_mpi: return "Open MPI";
    case Launcher::slurm: return "Slurm";
  }
  return "?";
}

std::string LaunchEnv::describe() const {
  std::string s = std::string(launcher_name(launcher)) + ": rank " + std::to_string(rank) + " of " +
                  std::to_string(world_size) + " (local " + std::to_string(local_rank) + " of " +
                  std::to_string(local_world_size) + ")";
  if (!store_file.empty()) return s + ", store file " + store_file;
  if (world_size > 1) {
    s += ", store " + store_host + ":" + std::to_string(store_port);
    auto it = from.find("store_host");
    auto jt = from.find("store_port");
    s += " (host from " + (it == from.end() ? std::string("default") : it->second) + "; port from " +
         (jt == from.end() ? std::string("default") : jt->second) + ")";
  }
  return s;
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
}

EnvLookup map_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

HostFacts this_host() {
  HostFacts h;
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) == 0) h.hostname = buf;
  const std::string me = h.hostname;
  h.is_local = [me](const std::string& host) {
    auto shortname = [](const std::string& s) { return s.substr(0, s.find('.')); };
    if (host == "localhost" || (!me.empty() && shortname(host) == shortname(me))) return true;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
    ifaddrs* ifs = nullptr;
    getifaddrs(&ifs);  // on failure: only loopback counts
    bool local = false;
    for (addrinfo* a = res; a != nullptr && !local; a = a->ai_next) {
      if (a->ai_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
        if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) local = true;
        for (ifaddrs* i = ifs; i != nullptr && !local; i = i->ifa_next) {
          if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
              reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == in->sin_addr.s_addr) {
            local = true;
          }
        }
      } else if (a->ai_family == AF_INET6) {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
        if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) local = true;
        for (ifaddrs* i = ifs; i != nullptr && !local; i = i->ifa_next) {
          if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6 &&
              std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, &in6->sin6_addr,
                          sizeof(in6_addr)) == 0) {
            local = true;
          }
        }
      }
    }
    if (ifs) freeifaddrs(ifs);
    freeaddrinfo(res);
    return local;
  };
  return h;
}

LaunchEnv resolve_launch_env(const EnvLookup& env, const HostFacts& host) {
  if (env("RANK")) return from_explicit(env);
  if (env("OMPI_COMM_WORLD_SIZE")) return from_open_mpi(env, host);
  if ((env("SLURM_STEP_ID") || env("SLURM_STEPID")) && env("SLURM_PROCID")) return from_slurm_step(env, host);
  refuse_unjoinable(env);
  LaunchEnv e;
  finish(env, e);
  return e;
}

LaunchEnv resolve_launch_env() { return resolve_launch_env(process_env(), this_host()); }

void check_local_launch(const LaunchEnv& env, int nproc) {
  if (nproc <= 1 || env.world_size == 1 || nproc == env.world_size) return;
  throw std::invalid_argument("--nproc " + std::to_string(nproc) + " inside a job of " +
                              std::to_string(env.world_size) + " processes started by " + launcher_name(env.launcher) +
                              " (" + env.describe() + "): the launcher already started the ranks; drop --nproc");
}

int slurm_port(uint64_t job_id, uint64_t step_id) {
  return 20000 + static_cast<int>(job_id % 625) * 16 + static_cast<int>(step_id % 16);
}

int open_mpi_port(uint64_t ess_jobid) {
  // jobid = (job family << 16) | local job number; mpirun's own job is local number 1.
  const uint64_t family = (ess_jobid >> 16) & 0xffff, local = ess_jobid & 0xffff;
  return 20000 + static_cast<int>((family * 16 + local % 16) % 10000);
}

int port_from_text(const std::string& id) { return 20000 + static_cast<int>(fnv1a(id) % 10000); }

}  // namespace zeroshard::comm
