#!/usr/bin/env bash
# A zeroshard built without its optional parts (scripts/core_build.sh), end to end:
#   1. --version says every optional part is out;
#   2. the default job (byte-level, no tokenizer, no media) trains under all four strategies at
#      W = 3 with gradient accumulation, with bitwise-identical losses and gradient norms;
#   3. what needs a part is refused by name before training starts (run.tensorboard), with exit 1
#      and nothing half-written.
# Usage: tests/core_binary_check.sh path/to/zeroshard
set -euo pipefail
BIN="$(realpath "$1")"
WORK="$(mktemp -d /tmp/zs_core_check.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "core_binary_check: FAILED: $*" >&2; exit 1; }

version="$("$BIN" --version)"
echo "$version"
for option in IMAGES VIDEO TOKENIZERS SENTENCEPIECE TENSORBOARD; do
  grep -q -- "-DZEROSHARD_WITH_${option}=ON" <<< "$version" || fail "--version does not list ZEROSHARD_WITH_${option} as left out"
done

for strategy in no_shard optim optim_grads optim_grads_params; do
  "$BIN" train --nproc 3 --set parallel.strategy=$strategy --set train.steps=6 --set train.grad_accum=2 \
    --set parallel.threads=1 --set run.progress=false --set run.dir="$WORK/$strategy" > "$WORK/$strategy.log" 2>&1 \
    || { cat "$WORK/$strategy.log"; fail "the default job under $strategy"; }
done
/usr/bin/env python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def curve(s):
    return [(l["step"], l["loss"], l["grad_norm"]) for l in map(json.loads, open(f"{work}/{s}/metrics.jsonl")) if "loss" in l]
ref = curve("no_shard")
assert len(ref) == 6, f"no_shard logged {len(ref)} steps, expected 6"
for s in ["optim", "optim_grads", "optim_grads_params"]:
    got = curve(s)
    assert got == ref, f"{s} differs from no_shard:\n{got}\n{ref}"
print(f"four strategies at W = 3, grad_accum 2: {len(ref)} steps, losses and gradient norms bitwise equal; last loss {ref[-1][1]!r}")
PY

set +e
"$BIN" train --nproc 2 --set run.tensorboard=true --set train.steps=2 --set run.dir="$WORK/tb" > "$WORK/tb.log" 2>&1
rc=$?
set -e
cat "$WORK/tb.log"
[ "$rc" = 1 ] || fail "run.tensorboard=true in a core build exited $rc, expected 1"
grep -q "run.tensorboard=true needs TensorBoard event files" "$WORK/tb.log" || fail "the refusal does not name run.tensorboard"
grep -q -- "-DZEROSHARD_WITH_TENSORBOARD=ON" "$WORK/tb.log" || fail "the refusal does not name the CMake option"
[ ! -e "$WORK/tb/metrics.jsonl" ] || fail "a refused run wrote $WORK/tb/metrics.jsonl"
echo "core_binary_check: passed"
