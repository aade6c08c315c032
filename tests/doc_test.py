#!/usr/bin/env python3
"""Runs every command block of the documentation as a reader pastes it, and checks what it shows.

A command block is a fenced block whose info string is `console`: lines starting with `$ ` are commands
(a trailing backslash continues one onto the next line), the lines after a command are the output it
shows. Each document's blocks run in order in one scratch directory (so a later block may read what an
earlier one wrote), with gdn-verify on PATH, copies of fixtures/ and tests/data/, a `build` link to the
build directory, and no OMPI_ALLOW_RUN_AS_ROOT* in the environment (a block that runs mpirun as root
must say so itself). A command passes when it exits 0 (or its block shows `echo exit=$?`, which
prints the code it had) and its shown output is what it printed: the shown lines between two `...` lines
are consecutive lines of the output, in order; a block's output that neither starts nor ends with
`...` is the whole output. Times (`0.25 s`, `3.1s`, `12 ms`) match any time.

README.md may have at most README_MAX_LINES lines. A block preceded by `<!-- doc-test: skip (reason) -->` is reported skipped with the reason (a GPU, the
Python bridge, a long run). A `$ ` prompt outside a console block is an error: it would go unchecked.

usage: doc_test.py --bin BUILD/gdn-verify --root REPO [FILE.md...]
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = re.compile(r"^<!--\s*doc-test:\s*skip\s*\((.+)\)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w-]*)")
TIME = re.compile(r"\b\d+(\.\d+)?\s?(s|ms)\b")
COMMAND_TIMEOUT_S = 60
README_MAX_LINES = 200  # the front page: what it is, the quick start, the commands, where things live


class Block:
    def __init__(self, path, line, info, lines, skip):
        self.path, self.line, self.info, self.lines, self.skip = path, line, info, lines, skip

    def where(self):
        return f"{self.path}:{self.line}"

    def commands(self):
        """[(command, [shown output lines])] of a console block."""
        out, i = [], 0
        while i < len(self.lines):
            line = self.lines[i]
            if not line.startswith("$ "):
                raise ValueError(f"{self.where()}: output line before any '$ ' command: {line!r}")
            cmd = line[2:]
            while cmd.endswith("\\") and i + 1 < len(self.lines):
                i += 1
                cmd = cmd[:-1] + " " + self.lines[i].strip()
            i += 1
            shown = []
            while i < len(self.lines) and not self.lines[i].startswith("$ "):
                shown.append(self.lines[i])
                i += 1
            out.append((cmd, shown))
        return out


def blocks_of(path, text):
    """The fenced blocks of a markdown file; errors for a `$ ` prompt outside a console block."""
    blocks, errors = [], []
    lines = text.split("\n")
    i, previous = 0, ""
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].lstrip().startswith("$ "):
                errors.append(f"{path}:{i + 1}: a '$ ' command outside a ```console block goes unchecked: fence it")
            if lines[i].strip():
                previous = lines[i].strip()
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3)
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        skip = SKIP.match(previous)
        if info == "console":
            blocks.append(Block(path, start, info, body, skip.group(1) if skip else None))
        elif any(b.startswith("$ ") for b in body):
            errors.append(f"{path}:{start}: a block with '$ ' commands must be ```console (it is '{info}')")
        previous = ""
    return blocks, errors


def norm(line):
    return TIME.sub("<time>", line.rstrip())


def first_difference(seg, got, pos, first):
    """The first shown line of `seg` that the output lacks where `seg` would have to be."""
    starts = [pos] if first else [at for at in range(pos, len(got)) if got[at] == seg[0]]
    if not starts:
        return f"'{seg[0]}' is not in the output"
    best = max(starts, key=lambda at: next((k for k in range(len(seg)) if at + k >= len(got) or got[at + k] != seg[k]),
                                           len(seg)))
    k = next((k for k in range(len(seg)) if best + k >= len(got) or got[best + k] != seg[k]), len(seg))
    if k == len(seg):
        return "the output goes on after the last shown line (end the block with '...')"
    printed = got[best + k] if best + k < len(got) else "(end of output)"
    return f"shown '{seg[k]}', printed '{printed}'"


def match(shown, got):
    """None when `shown` (with `...` gaps) matches `got`, else what differs."""
    segments = [[]]
    for line in shown:
        if line.strip() == "...":
            segments.append([])
        else:
            segments[-1].append(norm(line))
    anchored_start = bool(shown) and shown[0].strip() != "..."
    anchored_end = bool(shown) and shown[-1].strip() != "..."
    got = [norm(g) for g in got]
    while got and not got[-1]:
        got.pop()
    pos = 0
    for n, seg in enumerate(segments):
        if not seg:
            continue
        first, last = n == 0 and anchored_start, n == len(segments) - 1 and anchored_end
        candidates = [pos] if first else range(pos, len(got) - len(seg) + 1)
        found = None
        for at in candidates:
            if got[at:at + len(seg)] == seg and (not last or at + len(seg) == len(got)):
                found = at
                break
        if found is None:
            return "shown lines" + (" (from the first printed line)" if first else "") + \
                   (" (to the last printed line)" if last else "") + " not printed: " + first_difference(seg, got, pos, first)
        pos = found + len(seg)
    return None  # a command with no output shown may print anything


def fh_lines(path):
    with open(path, encoding="utf-8") as fh:
        return sum(1 for _ in fh)


def scratch_for(root, build):
    d = tempfile.mkdtemp(prefix="gdnv_doc_")
    shutil.copytree(os.path.join(root, "fixtures"), os.path.join(d, "fixtures"))
    shutil.copytree(os.path.join(root, "tests", "data"), os.path.join(d, "tests", "data"))
    os.symlink(build, os.path.join(d, "build"))
    return d


def run_document(blocks, root, build, env, report):
    failures = 0
    scratch = scratch_for(root, build)
    try:
        for b in blocks:
            if b.skip:
                report.append(f"SKIP {b.where()}: {b.skip}")
                continue
            start = time.monotonic()
            for cmd, shown in b.commands():
                if cmd.startswith("export "):
                    for kv in cmd[len("export "):].split():
                        k, _, v = kv.partition("=")
                        env[k] = v
                try:
                    p = subprocess.run(["bash", "-c", cmd], cwd=scratch, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT_S, text=True, errors="replace")
                except subprocess.TimeoutExpired:
                    report.append(f"FAIL {b.where()}: '{cmd}' ran past {COMMAND_TIMEOUT_S} s: make it smaller or "
                                  "mark the block <!-- doc-test: skip (long run) -->")
                    failures += 1
                    break
                got = p.stdout.split("\n")
                if p.returncode != 0:
                    report.append(f"FAIL {b.where()}: '{cmd}' exited {p.returncode} (a block shows a non-zero "
                                  "exit with '; echo exit=$?'); it printed:\n  " + "\n  ".join(got[-15:]))
                    failures += 1
                    break
                diff = match(shown, got)
                if diff:
                    report.append(f"FAIL {b.where()}: '{cmd}': {diff}\n  it printed:\n  " + "\n  ".join(got[:40]))
                    failures += 1
                    break
            else:
                report.append(f"ok   {b.where()} ({len(b.commands())} commands, {time.monotonic() - start:.1f} s)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    binary = os.path.abspath(a.bin)
    files = a.files or ([os.path.join(root, "README.md"), os.path.join(root, "python", "README.md")] +
                        sorted(glob.glob(os.path.join(root, "docs", "*.md"))))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}
    env["PATH"] = os.path.dirname(binary) + os.pathsep + env.get("PATH", "")
    report, failures, errors, ran, skipped = [], 0, [], 0, 0
    start = time.monotonic()
    for f in files:
        rel = os.path.relpath(f, root)
        with open(f, encoding="utf-8") as fh:
            blocks, errs = blocks_of(rel, fh.read())
        errors += errs
        if rel == "README.md" and fh_lines(f) > README_MAX_LINES:
            errors.append(f"README.md: {fh_lines(f)} lines, more than {README_MAX_LINES}: move the depth to a page of docs/")
        try:
            for b in blocks:
                b.commands()
        except ValueError as e:
            errors.append(str(e))
            continue
        failures += run_document(blocks, root, os.path.dirname(binary), dict(env), report)
        ran += sum(1 for b in blocks if not b.skip)
        skipped += sum(1 for b in blocks if b.skip)
    print("\n".join(report))
    for e in errors:
        print("FAIL " + e)
    print(f"doc test: {len(files)} documents, {ran} command blocks run, {failures + len(errors)} failed, "
          f"{skipped} skipped, in {time.monotonic() - start:.1f} s")
    return 1 if failures or errors else 0


if __name__ == "__main__":
    sys.exit(main())
