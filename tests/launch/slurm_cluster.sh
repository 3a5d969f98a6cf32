#!/usr/bin/env bash
# A one-host Slurm cluster for the launcher tests: munged, slurmctld and slurmd from Debian's
# munge + slurm-wlm, all under one private folder (own munge socket, own ports, own state), so
# it neither needs nor touches /etc/slurm or a system munged.
#
#   slurm_cluster.sh start DIR   start the daemons; prints `export SLURM_CONF=DIR/slurm.conf`
#   slurm_cluster.sh stop DIR    stop what `start DIR` started (by the pids it recorded)
#   slurm_cluster.sh selftest    start in a temporary folder, run `srun -n 2 env`, stop
#
# Exit status 77 means "skipped" (ctest SKIP_RETURN_CODE): not root, a program missing, or a
# daemon that would not start; the reason is printed on stderr. Any other non-zero status is
# a failure. Ports: ZS_SLURMCTLD_PORT (default 16817) and ZS_SLURMD_PORT (default 16818).
set -euo pipefail

skip() { echo "slurm_cluster: SKIP: $*" >&2; exit 77; }
die() { echo "slurm_cluster: FAIL: $*" >&2; exit 1; }

stop_cluster() {
  local dir=$1
  for name in slurmd slurmctld munged; do
    local pidfile="$dir/$name.pid"
    [[ -f $pidfile ]] || continue
    local pid; pid=$(cat "$pidfile")
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
}

start_cluster() {
  local dir=$1
  [[ $(id -u) -eq 0 ]] || skip "not root: slurmd must run as root to start job steps as their user"
  for prog in munged slurmctld slurmd srun sbatch scontrol sinfo; do
    command -v "$prog" >/dev/null || skip "$prog not installed (Debian packages: munge slurm-wlm)"
  done
  [[ -r /etc/munge/munge.key ]] || skip "/etc/munge/munge.key missing (the munge package creates it)"
  mkdir -p "$dir"/{state,spool,log,munge}
  chmod 700 "$dir/munge"
  local host; host=$(hostname -s)
  local cpus; cpus=$(nproc)
  # Jobs here are small test ranks: advertise 8 CPUs whatever the machine has, so `srun -n 4`
  # fits; config_overrides makes slurmd believe the file instead of draining the node.
  (( cpus < 8 )) && cpus=8
  local ctld_port=${ZS_SLURMCTLD_PORT:-16817} slurmd_port=${ZS_SLURMD_PORT:-16818}
  cat > "$dir/slurm.conf" <<CONF
ClusterName=zstest
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
InactiveLimit=0
KillWait=5
MinJobAge=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=zs Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  munged --force --socket="$dir/munge/munge.socket" --pid-file="$dir/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed" \
    || skip "munged would not start: $(tail -n 3 "$dir/log/munged.log" 2>/dev/null)"
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -f "$dir/slurm.conf" -i \
    || { stop_cluster "$dir"; skip "slurmctld would not start: $(tail -n 5 "$dir/log/slurmctld.log" 2>/dev/null)"; }
  slurmd -f "$dir/slurm.conf" \
    || { stop_cluster "$dir"; skip "slurmd would not start: $(tail -n 5 "$dir/log/slurmd.log" 2>/dev/null)"; }
  # Up when the node reports idle (slurmd registered with slurmctld).
  local state=""
  for _ in $(seq 100); do
    state=$(sinfo -h -N -o '%t' 2>/dev/null | head -n 1 || true)
    [[ $state == idle* || $state == mix* ]] && break
    sleep 0.2
  done
  if [[ $state != idle* && $state != mix* ]]; then
    local why; why=$(tail -n 5 "$dir/log/slurmd.log" 2>/dev/null; tail -n 5 "$dir/log/slurmctld.log" 2>/dev/null)
    stop_cluster "$dir"
    skip "node did not become idle (state '$state'): $why"
  fi
  echo "export SLURM_CONF=$dir/slurm.conf"
}

case ${1:-} in
  start) [[ $# -eq 2 ]] || die "usage: $0 start DIR"; start_cluster "$2" ;;
  stop) [[ $# -eq 2 ]] || die "usage: $0 stop DIR"; stop_cluster "$2" ;;
  selftest)
    dir=$(mktemp -d /tmp/zs-slurm.XXXXXX)
    trap 'stop_cluster "$dir"' EXIT
    start_cluster "$dir" >/dev/null
    export SLURM_CONF="$dir/slurm.conf"
    out=$(timeout 60 srun -n 2 env) || die "srun -n 2 env failed: $out"
    n=$(grep -c '^SLURM_PROCID=' <<<"$out" || true)
    [[ $n -eq 2 ]] || die "srun -n 2 started $n tasks, expected 2"
    grep -E '^SLURM_' <<<"$out" | sort
    ;;
  *) die "usage: $0 start DIR | stop DIR | selftest" ;;
esac
