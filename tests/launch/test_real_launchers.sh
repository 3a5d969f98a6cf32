#!/usr/bin/env bash
# resolve_launch_env under the real launchers: Open MPI's mpirun (openmpi-bin), and srun,
# sbatch and salloc on a one-host Slurm cluster (slurm_cluster.sh, root only).
#   test_real_launchers.sh PROBE   (PROBE: the built tests/launch/launch_env_probe)
# Exit 0: all checks passed; 77: skipped (reason on stderr); else failed.
set -euo pipefail
probe=$(readlink -f "${1:?usage: $0 PROBE}")
here=$(cd "$(dirname "$0")" && pwd)
fail=0
check() {  # check NAME EXPECTED_REGEX OUTPUT
  if grep -Eq -- "$2" <<<"$3"; then echo "ok   $1"; else echo "FAIL $1: expected /$2/ in:"; sed 's/^/     | /' <<<"$3"; fail=1; fi
}
count() { grep -Ec -- "$1" <<<"$2" || true; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT ZEROSHARD_STORE_FILE

ran=0
if command -v mpirun >/dev/null; then
  ran=1
  out=$(cd /tmp && timeout 120 mpirun -np 2 --oversubscribe --allow-run-as-root "$probe" 2>&1 || true)
  check "mpirun -np 2: rank 0" '^launcher=Open MPI rank=0 world=2 local_rank=0 local_world=2 store=127\.0\.0\.1:2[0-9]{4}$' "$out"
  check "mpirun -np 2: rank 1" '^launcher=Open MPI rank=1 world=2 local_rank=1 local_world=2 store=127\.0\.0\.1:2[0-9]{4}$' "$out"
  [[ $(grep -o 'store=.*' <<<"$out" | sort -u | wc -l) -eq 1 ]] || { echo "FAIL mpirun: ranks disagree on the store: $out"; fail=1; }
else
  echo "skip mpirun: not installed (Debian package openmpi-bin)" >&2
fi

dir=$(mktemp -d /tmp/zs-slurm.XXXXXX)
trap '"$here/slurm_cluster.sh" stop "$dir"; rm -rf "$dir"' EXIT
set +e
"$here/slurm_cluster.sh" start "$dir" >/dev/null
rc=$?
set -e
if [[ $rc -eq 0 ]]; then
  ran=1
  export SLURM_CONF="$dir/slurm.conf"
  cd "$dir"
  out=$(timeout 120 srun -n 2 "$probe" 2>&1 || true)
  check "srun -n 2: rank 0" '^launcher=Slurm rank=0 world=2 local_rank=0 local_world=2 store=[^:]+:2[0-9]{4}$' "$out"
  check "srun -n 2: rank 1" '^launcher=Slurm rank=1 world=2 local_rank=1 local_world=2 store=[^:]+:2[0-9]{4}$' "$out"
  [[ $(grep -o 'store=.*' <<<"$out" | sort -u | wc -l) -eq 1 ]] || { echo "FAIL srun: tasks disagree on the store: $out"; fail=1; }
  out=$(timeout 120 srun -n 1 "$probe" 2>&1 || true)
  check "srun -n 1" '^launcher=Slurm rank=0 world=1 local_rank=0 local_world=1' "$out"
  # An sbatch script that runs the probe itself (refused: 3 tasks asked for) and through srun.
  cat > job.sh <<JOB
#!/bin/bash
"$probe"
echo "---"
srun "$probe"
echo "---"
mpirun -np 2 --oversubscribe --allow-run-as-root "$probe"
JOB
  timeout 120 sbatch -n 3 -o batch.out --wait job.sh >/dev/null 2>&1 || true
  out=$(cat batch.out 2>/dev/null || echo "(no batch.out)")
  check "sbatch -n 3, run directly: refused" '^error: Slurm job [0-9]+ has SLURM_NTASKS=3 tasks, but this process is not one of them' "$out"
  for r in 0 1 2; do
    check "sbatch -n 3, srun: task $r" "^launcher=Slurm rank=$r world=3 local_rank=$r local_world=3 " "$out"
  done
  check "sbatch -n 3, mpirun inside: rank 1" '^launcher=Open MPI rank=1 world=2 ' "$out"
  # examples/slurm_train.sbatch, with the probe standing in for zeroshard.
  ZEROSHARD="$probe" timeout 120 sbatch -o example.out --wait "$here/../../examples/slurm_train.sbatch" >/dev/null 2>&1 || true
  out=$(cat example.out 2>/dev/null || echo "(no example.out)")
  check "examples/slurm_train.sbatch: task 0" '^launcher=Slurm rank=0 world=2 local_rank=0 local_world=2 ' "$out"
  check "examples/slurm_train.sbatch: task 1" '^launcher=Slurm rank=1 world=2 local_rank=1 local_world=2 ' "$out"
  # mpirun inside an srun task (how Open MPI starts its daemons on Slurm nodes): the ranks
  # inherit the task's SLURM_STEP_ID / SLURM_PROCID=0, and must still follow mpirun's variables.
  out=$(timeout 120 srun -n 1 mpirun -np 2 --oversubscribe --allow-run-as-root "$probe" 2>&1 || true)
  check "srun -n 1 mpirun -np 2: rank 0" '^launcher=Open MPI rank=0 world=2 ' "$out"
  check "srun -n 1 mpirun -np 2: rank 1" '^launcher=Open MPI rank=1 world=2 ' "$out"
  out=$(timeout 120 salloc -n 2 "$probe" 2>&1 || true)
  check "salloc -n 2, run directly: refused" '^error: Slurm job [0-9]+ has SLURM_NTASKS=2 tasks' "$out"
  [[ $(count '^launcher=' "$out") -eq 0 ]] || { echo "FAIL salloc: the probe ran as a job: $out"; fail=1; }
elif [[ $rc -ne 77 ]]; then
  echo "FAIL slurm_cluster.sh start: status $rc"; fail=1
fi
[[ $fail -eq 0 ]] || exit 1
[[ $ran -eq 1 ]] || { echo "test_real_launchers: SKIP: neither mpirun nor a Slurm cluster available" >&2; exit 77; }
echo "test_real_launchers: all checks passed"
