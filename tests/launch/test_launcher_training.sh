#!/usr/bin/env bash
# `zeroshard train` under the real launchers, and one run per folder:
#   - mpirun -np 2 (Open MPI, openmpi-bin) and srun -n 2 / sbatch examples/slurm_train.sbatch on
#     a one-host Slurm cluster (slurm_cluster.sh: root only) train the same small model as
#     `zeroshard train --nproc 2`, with bitwise the same loss and gradient norm at every step;
#   - a second job started on a run folder whose job still runs is refused, naming the holder;
#   - a new run in the folder of a finished one is refused unless --resume or run.overwrite.
#
#   test_launcher_training.sh ZEROSHARD [mpi|slurm|folder ...]   (default: all three parts)
# Exit 0: all checks of the parts that could run passed; 77: nothing could run (reasons on
# stderr); else failed. Every result is compared with a reference run made here, never with
# numbers written into this script.
set -euo pipefail
zs=$(readlink -f "${1:?usage: $0 ZEROSHARD [mpi|slurm|folder ...]}")
shift
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(mpi slurm folder)
here=$(cd "$(dirname "$0")" && pwd)
examples=$(cd "$here/../../examples" && pwd)
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT ZEROSHARD_STORE_FILE
tmp=$(mktemp -d /tmp/zs-launch-train.XXXXXX)
slurm_dir=""
cleanup() {
  [[ -z $slurm_dir ]] || "$here/slurm_cluster.sh" stop "$slurm_dir" || true
  [[ -z ${bg_pid:-} ]] || kill "$bg_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
ran=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

# The small Llama of tests/support/train_run.cpp (kSmallModel), 5 steps.
model=(--set data.source=synthetic --set model.dim=48 --set model.n_layers=2 --set model.n_heads=4
       --set model.n_kv_heads=2 --set model.ffn_hidden=100 --set model.max_seq_len=32 --set train.seq_len=32
       --set train.lr=0.01 --set train.min_lr=0.001 --set train.warmup_steps=3 --set run.progress=false
       --set parallel.comm_timeout_s=60 --set train.steps=5)

# "step loss grad_norm" per line of DIR/metrics.jsonl; Python's float repr round-trips, so equal
# text means equal bits.
losses() {
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    m = json.loads(l); print(m["step"], repr(float(m["loss"])), repr(float(m["grad_norm"])))' "$1/metrics.jsonl"
}
same_as_reference() {  # NAME DIR
  local got
  got=$(losses "$2" 2>&1) || { bad "$1: no metrics ($got)"; return; }
  if [[ $got == "$reference" ]]; then ok "$1: $(wc -l <<<"$got") steps bitwise equal to --nproc 2"
  else bad "$1: differs from --nproc 2:"; diff <(echo "$reference") <(echo "$got") | sed 's/^/     | /'; fi
}

timeout 300 "$zs" train --nproc 2 "${model[@]}" --set run.dir="$tmp/ref" > "$tmp/ref.out" 2>&1 ||
  { echo "FAIL reference run --nproc 2:"; cat "$tmp/ref.out"; exit 1; }
reference=$(losses "$tmp/ref")
[[ $(wc -l <<<"$reference") -eq 5 ]] || { echo "FAIL reference run: expected 5 metrics lines: $reference"; exit 1; }

for part in "${parts[@]}"; do
  case $part in
  mpi)
    if ! command -v mpirun >/dev/null; then echo "skip mpi: mpirun not installed (Debian openmpi-bin)" >&2; continue; fi
    ran=1
    # As root Open MPI refuses to start without --allow-run-as-root; --oversubscribe: 2 ranks
    # may exceed the cores it counts.
    mpi_args=(-np 2 --oversubscribe)
    [[ $(id -u) -ne 0 ]] || mpi_args+=(--allow-run-as-root)
    if (cd "$tmp" && timeout 300 mpirun "${mpi_args[@]}" "$zs" train "${model[@]}" --set run.dir="$tmp/mpi") \
        > "$tmp/mpi.out" 2>&1; then
      same_as_reference "mpirun -np 2" "$tmp/mpi"
      grep -q "world_size=2" "$tmp/mpi/rank1.log" && ok "mpirun -np 2: one job of 2 ranks (rank1.log)" ||
        bad "mpirun -np 2: no rank1.log with world_size=2"
    else
      bad "mpirun -np 2 failed:"; sed 's/^/     | /' "$tmp/mpi.out"
    fi
    ;;
  slurm)
    slurm_dir="$tmp/slurm"
    set +e
    "$here/slurm_cluster.sh" start "$slurm_dir" > /dev/null
    rc=$?
    set -e
    if [[ $rc -eq 77 ]]; then slurm_dir=""; continue; fi  # the reason is on stderr
    [[ $rc -eq 0 ]] || { bad "slurm_cluster.sh start: status $rc"; slurm_dir=""; continue; }
    ran=1
    export SLURM_CONF="$slurm_dir/slurm.conf"
    if (cd "$tmp" && timeout 300 srun -n 2 "$zs" train "${model[@]}" --set run.dir="$tmp/srun") \
        > "$tmp/srun.out" 2>&1; then
      same_as_reference "srun -n 2" "$tmp/srun"
    else
      bad "srun -n 2 failed:"; sed 's/^/     | /' "$tmp/srun.out"
    fi
    if (cd "$tmp" && ZEROSHARD="$zs" timeout 300 sbatch --wait -o "$tmp/sbatch.out" \
          "$examples/slurm_train.sbatch" "${model[@]}" --set run.dir="$tmp/sbatch") > /dev/null 2>&1; then
      same_as_reference "sbatch examples/slurm_train.sbatch" "$tmp/sbatch"
    else
      bad "sbatch examples/slurm_train.sbatch failed:"; sed 's/^/     | /' "$tmp/sbatch.out" 2>/dev/null || true
    fi
    # Two tasks of a job step running zeroshard without srun would be two jobs: an sbatch
    # script asking for 2 tasks that runs zeroshard directly is refused, and writes nothing.
    printf '#!/bin/bash\n"%s" train %s --set run.dir=%s\n' "$zs" "${model[*]}" "$tmp/direct" > "$tmp/direct.sh"
    (cd "$tmp" && timeout 300 sbatch --wait -n 2 -o "$tmp/direct.out" "$tmp/direct.sh") > /dev/null 2>&1 || true
    if grep -q "SLURM_NTASKS=2" "$tmp/direct.out" && [[ ! -s $tmp/direct/metrics.jsonl ]]; then
      ok "sbatch -n 2 running zeroshard without srun: refused ($(grep -m1 -o 'error.*' "$tmp/direct.out" | cut -c1-100)...)"
    else
      bad "sbatch -n 2 without srun was not refused:"; sed 's/^/     | /' "$tmp/direct.out"
    fi
    ;;
  folder)
    ran=1
    # A finished run: a new run there is refused, naming --resume and run.overwrite.
    if "$zs" train --nproc 2 "${model[@]}" --set run.dir="$tmp/ref" > "$tmp/again.out" 2>&1; then
      bad "a second run in a finished run's folder was not refused"
    elif grep -q -- "--resume" "$tmp/again.out" && grep -q "run.overwrite" "$tmp/again.out" &&
         [[ $(losses "$tmp/ref") == "$reference" ]]; then
      ok "finished run kept: $(grep -m1 -o 'error.*' "$tmp/again.out" | cut -c1-140)..."
    else
      bad "second run in a finished folder: wrong refusal or metrics changed:"; sed 's/^/     | /' "$tmp/again.out"
    fi
    if "$zs" train --nproc 2 "${model[@]}" --set run.dir="$tmp/ref" --set run.overwrite=true > "$tmp/over.out" 2>&1 &&
       [[ $(losses "$tmp/ref") == "$reference" ]]; then
      ok "run.overwrite=true: starts over (5 fresh metrics lines, equal to the first run)"
    else
      bad "run.overwrite=true:"; sed 's/^/     | /' "$tmp/over.out"
    fi
    # A job that still runs: a second job on its folder is refused naming host and pid.
    "$zs" train --nproc 2 "${model[@]}" --set train.steps=100000 --set run.dir="$tmp/busy" > "$tmp/busy.out" 2>&1 &
    bg_pid=$!
    for _ in $(seq 600); do [[ -s $tmp/busy/metrics.jsonl ]] && break; sleep 0.1; done
    if "$zs" train --nproc 2 "${model[@]}" --set run.dir="$tmp/busy" --set run.overwrite=true > "$tmp/second.out" 2>&1; then
      bad "a second job on a locked run folder ran"
    elif grep -q "in use by another job: host $(hostname), pid [0-9]" "$tmp/second.out"; then
      ok "second job refused: $(grep -m1 -o 'in use.*' "$tmp/second.out" | cut -c1-140)..."
    else
      bad "second job on a locked folder: wrong message:"; sed 's/^/     | /' "$tmp/second.out"
    fi
    kill "$bg_pid" 2>/dev/null || true
    wait "$bg_pid" 2>/dev/null || true
    bg_pid=""
    ;;
  *) echo "unknown part '$part' (mpi, slurm, folder)" >&2; exit 2 ;;
  esac
done
[[ $fail -eq 0 ]] || exit 1
[[ $ran -eq 1 ]] || { echo "test_launcher_training: SKIP: no part could run" >&2; exit 77; }
echo "test_launcher_training: all checks passed"
