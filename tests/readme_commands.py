#!/usr/bin/env python3
"""Runs every command the README shows that needs no download, as written.

    tests/readme_commands.py [--list]

The commands are the lines of the README's ```sh blocks (a block with a shell loop runs whole,
the others a command at a time, backslash continuations joined) and its inline spans that start
with `build/zeroshard `. They run in a scratch folder that holds links to the repository's
build/, configs/, examples/ and tests/ (so what they write, runs/ and exported files included,
lands there), except ./run.sh, which runs in the repository as the README says. A placeholder
`runs/<run>` is the newest run folder at that moment. The commands that are not run are listed
in SKIPPED with the reason; any other command the README gains is run. Exit 0 when every command
ran and exited 0; each command is printed with its exit status and seconds.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Substring of a command -> why it is not run here.
SKIPPED = {
    "./test.sh": "runs this test among all the others (CI runs ./test.sh)",
    "MASTER_ADDR=10.0.0.1": "needs a second host at 10.0.0.1; `ctest -R TwoHosts` runs it in two network namespaces",
}


def sh_blocks(text):
    """The README's ```sh blocks: (first line number, list of lines)."""
    blocks, lines, start, inside = [], [], 0, False
    for number, line in enumerate(text.splitlines(), 1):
        if not inside and line.strip() == "```sh":
            inside, lines, start = True, [], number + 1
        elif inside and line.strip() == "```":
            inside = False
            blocks.append((start, lines))
        elif inside:
            lines.append(line)
    return blocks


def strip_comment(line):
    """The line without a trailing `# comment` outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands(text):
    """(README line, command) in README order."""
    out = []
    for start, lines in sh_blocks(text):
        body = [strip_comment(l) for l in lines]
        if any(re.match(r"\s*(for|while)\b", l) for l in body):
            out.append((start, "\n".join(l for l in body if l.strip())))
            continue
        joined, first = "", None
        for offset, line in enumerate(body):
            if not line.strip():
                continue
            if first is None:
                first = start + offset
            if line.endswith("\\"):
                joined += line[:-1].strip() + " "
                continue
            out.append((first, (joined + line.strip()).strip()))
            joined, first = "", None
    for m in re.finditer(r"`(build/zeroshard [^`]+)`", text):
        out.append((text.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split())))
    return out


def newest_run(cwd):
    runs = [os.path.join(cwd, "runs", d) for d in os.listdir(os.path.join(cwd, "runs"))] if os.path.isdir(
        os.path.join(cwd, "runs")) else []
    runs = [r for r in runs if os.path.isfile(os.path.join(r, "metrics.jsonl"))]
    if not runs:
        raise RuntimeError("runs/<run>: no run folder yet in " + cwd)
    return "runs/" + os.path.basename(max(runs, key=os.path.getmtime))


def main():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    todo = commands(text)
    if len(todo) < 10:
        print(f"README.md: only {len(todo)} commands found; the ```sh blocks are not parsed as expected")
        return 1
    if "--list" in sys.argv:
        for line, cmd in todo:
            print(f"README.md:{line}: {cmd}")
        return 0
    scratch = tempfile.mkdtemp(prefix="zs_readme_")
    for name in ("build", "configs", "examples", "tests"):
        os.symlink(os.path.join(ROOT, name), os.path.join(scratch, name))
    os.makedirs(os.path.join(scratch, "docs"))
    env = dict(os.environ)
    # ./run.sh configures the build again: with the flags it was built with, so it stays a no-op.
    cache = open(os.path.join(ROOT, "build", "CMakeCache.txt"), encoding="utf-8").read()
    m = re.search(r"^ZEROSHARD_WERROR:\w+=(\w+)", cache, re.M)
    env["ZEROSHARD_WERROR"] = m.group(1) if m else "OFF"
    failed, ran = [], 0
    for line, cmd in todo:
        why = next((w for key, w in SKIPPED.items() if key in cmd), None)
        if why:
            print(f"README.md:{line}: skipped ({why}): {cmd}", flush=True)
            continue
        cwd = ROOT if cmd.startswith("./run.sh") else scratch
        if "runs/<run>" in cmd:
            cmd = cmd.replace("runs/<run>", newest_run(cwd))
        t0 = time.time()
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, errors="replace")
        ran += 1
        print(f"README.md:{line}: exit {r.returncode} in {time.time() - t0:.1f} s: {cmd}", flush=True)
        if r.returncode != 0:
            failed.append((line, cmd))
            print("  " + "\n  ".join(r.stdout.splitlines()[-30:]), flush=True)
    print(f"{ran} commands run, {len(failed)} failed")
    if not failed:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
