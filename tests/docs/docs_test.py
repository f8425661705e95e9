#!/usr/bin/env python3
"""The docs test: every shell command README.md and docs/*.md show is run as written.

Each fenced block must name its language (```sh, ```console, ```text, ```yaml, ```c, ```json,
```python): an untagged block fails the test, so a command cannot hide in one. Then:

  ```sh       the whole block runs as one bash script (set -e: any failing line fails it);
  ```console  the lines after "$ " (with their "\\" continuation lines) run; the rest is output.

The blocks of one file run in order in one scratch directory shaped like the repository (its
top-level entries are links to the checkout, `build` to the build under test), so a block may use
what an earlier block of the same file wrote (a checkpoint, input.txt). Each file starts afresh,
so files are independent: --jobs N (default $TESSERA_DOCS_JOBS, else 2) run at a time, each
file's results printed together when it finishes (with --jobs 1, as each block finishes).
The environment adds only:
  - TESSERA_MAX_STEPS (default 3): every training run stops after that many steps (the one
    documented way to shorten a run, docs/config.md); the commands are otherwise unchanged;
  - PATH: `tessera` is the build's (the docs write `tessera` and `build/tessera` alike);
  - HOME and XDG_CACHE_HOME in the scratch directory, TESSERA_CLUSTER_CACHE unset (`tessera
    calibrate` caches there: a documented calibration must not change the machine's own, which
    other tests read, nor another file's);
  - with files run at the same time, OMPI_MCA_mpi_yield_when_idle=1: Open MPI's ranks yield the
    core while they wait, as it makes them do itself when a job has more ranks than cores. A job
    that fits the cores polls instead, and two files' jobs of 2 ranks on 2 cores spin against each
    other (two such trainings at once: 23-27 s, 15 s with the setting; one alone: 7 s).

A comment on the line before a block changes how it is checked:
  <!-- docs-test: skip REASON -->   not run (hardware this machine lacks, hours of run time, or
                                    the suite itself); REASON is printed
  <!-- docs-test: exit N -->        the block's last command must exit with N (a documented refusal)

Usage: docs_test.py --repo DIR --build DIR [--max-steps N] [--timeout S] [--jobs N] [--list]
                    [--only TEXT] [--keep] [FILE.md ...]   (default: README.md and docs/*.md of --repo)
Exit status: 0 every block passed, 1 a block failed or a fence has no language, 2 bad usage.
"""
import argparse
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

LANGS = {"sh", "console", "text", "yaml", "c", "json", "python"}
MARK = re.compile(r"^\s*<!--\s*docs-test:\s*(skip|exit)\b\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


class Block:
    def __init__(self, path, line, lang, body, mark):
        self.path, self.line, self.lang, self.body, self.mark = path, line, lang, body, mark

    def where(self):
        return "%s:%d" % (self.path, self.line)

    def script(self):
        """The commands to run, as a bash script."""
        if self.lang == "sh":
            return "\n".join(self.body) + "\n"
        out, cont = [], False
        for l in self.body:
            s = l.strip()
            if cont:
                out.append(l)
                cont = s.endswith("\\")
            elif s.startswith("$ "):
                out.append(s[2:])
                cont = s.endswith("\\")
        return "\n".join(out) + "\n"


def parse(path, shown):
    """The fenced blocks of one file; errors: fences without a language."""
    blocks, errors = [], []
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        if j == len(lines):
            errors.append("%s:%d: a fence that is never closed" % (shown, i + 1))
            break
        if not lang:
            errors.append("%s:%d: a fenced block without a language: tag it ```sh (run by this test), ```console "
                          "(its \"$ \" lines run) or ```text (output, not run)" % (shown, i + 1))
        elif lang not in LANGS:
            errors.append("%s:%d: fence language '%s' is not one of %s" % (shown, i + 1, lang,
                                                                           ", ".join(sorted(LANGS))))
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mm = MARK.match(lines[k]) if k >= 0 else None
        mark = (mm.group(1), mm.group(2)) if mm else None
        if mark and mark[0] == "skip" and not mark[1]:
            errors.append("%s:%d: docs-test: skip without a reason" % (shown, k + 1))
        if mark and mark[0] == "exit" and not re.fullmatch(r"\d+", mark[1]):
            errors.append("%s:%d: docs-test: exit needs a number, got '%s'" % (shown, k + 1, mark[1]))
        body = [l[len(indent):] if l.startswith(indent) else l for l in lines[i + 1:j]]
        blocks.append(Block(shown, i + 1, lang, body, mark))
        i = j + 1
    return blocks, errors


def scratch_for(repo, build):
    """A directory shaped like the repository: links to its top-level entries, build -> build."""
    d = tempfile.mkdtemp(prefix="tessera-docs.")
    skip = {".git", "build", "checkpoints", "runs", "data"}
    for e in os.listdir(repo):
        if e in skip or e.startswith("build-") or e.startswith("."):
            continue
        os.symlink(os.path.join(repo, e), os.path.join(d, e))
    os.symlink(build, os.path.join(d, "build"))
    os.makedirs(os.path.join(d, ".home", ".cache"))
    os.makedirs(os.path.join(d, ".bin"))
    os.symlink(os.path.join(build, "tessera"), os.path.join(d, ".bin", "tessera"))
    return d


def run_page(a, repo, build, runnable, emit):
    """Runs one file's blocks in order in a scratch directory of its own; emit(line) reports each
    result. Returns (blocks run, FILE:LINE of the failed ones, skipped ones with their reasons)."""
    ran, failed, skipped = 0, [], []
    d = None if a.list else scratch_for(repo, build)
    env = dict(os.environ)
    if d:
        env.pop("TESSERA_CLUSTER_CACHE", None)
        if a.jobs > 1:
            env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
        env.update(TESSERA_MAX_STEPS=str(a.max_steps), HOME=os.path.join(d, ".home"),
                   XDG_CACHE_HOME=os.path.join(d, ".home", ".cache"),
                   PATH=os.path.join(d, ".bin") + os.pathsep + env.get("PATH", "/usr/bin:/bin"))
    for b in runnable:
        if b.mark and b.mark[0] == "skip":
            skipped.append("%s: %s" % (b.where(), b.mark[1]))
            emit("SKIP %s: %s\n" % (b.where(), b.mark[1]))
            continue
        want = int(b.mark[1]) if b.mark and b.mark[0] == "exit" else 0
        if a.list:
            emit("RUN  %s (%s, expect exit %d):\n%s" % (b.where(), b.lang, want, b.script()))
            continue
        script = ("set -e\n" if want == 0 else "") + b.script()
        t0 = time.time()
        try:
            p = subprocess.run(["bash", "-c", script], cwd=d, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=a.timeout)
            rc, out = p.returncode, p.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            rc, out = "timeout after %g s" % a.timeout, (e.stdout or b"").decode("utf-8", "replace")
        dt = time.time() - t0
        ran += 1
        if rc == want:
            emit("ok   %s (%.1f s)\n" % (b.where(), dt))
        else:
            failed.append(b.where())
            tail = "\n".join(out.rstrip("\n").split("\n")[-25:])
            emit("FAIL %s: exit %s, expected %d (%.1f s); the block:\n%s--- its output (last 25 lines):\n%s\n---\n"
                 % (b.where(), rc, want, dt, "".join("    " + l + "\n" for l in b.script().rstrip("\n").split("\n")),
                    tail))
    if d and not a.keep:
        shutil.rmtree(d, ignore_errors=True)
    elif d:
        emit("kept %s\n" % d)
    return ran, failed, skipped


def jobs_default():
    v = os.environ.get("TESSERA_DOCS_JOBS", "")
    return int(v) if v.isdigit() and int(v) > 0 else 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--max-steps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per block")
    ap.add_argument("--jobs", type=int, default=jobs_default(),
                    help="files run at a time (default $TESSERA_DOCS_JOBS, else 2)")
    ap.add_argument("--list", action="store_true", help="list the blocks and what would be done, run nothing")
    ap.add_argument("--only", help="run only blocks whose FILE:LINE or text contains this")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directories")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    if a.jobs < 1:
        ap.error("--jobs needs a positive number, got %d" % a.jobs)
    repo, build = os.path.abspath(a.repo), os.path.abspath(a.build)
    if not os.path.isfile(os.path.join(build, "tessera")):
        print("docs_test: %s has no tessera binary (build it first)" % build, file=sys.stderr)
        return 2
    files = a.files or [os.path.join(repo, "README.md")] + sorted(glob.glob(os.path.join(repo, "docs", "*.md")))
    failed, errors, ran, skipped, t_all = [], [], 0, [], time.time()
    pages = []  # the runnable blocks of each file, in the files' order
    for f in files:
        shown = os.path.relpath(f, repo) if os.path.abspath(f).startswith(repo + os.sep) else f
        blocks, errs = parse(f, shown)
        errors += errs
        runnable = [b for b in blocks if b.lang in ("sh", "console") and b.script().strip()]
        if a.only:
            runnable = [b for b in runnable if a.only in b.where() or a.only in b.script()]
        if runnable:
            pages.append(runnable)

    def add(result):
        nonlocal ran
        ran += result[0]
        failed.extend(result[1])
        skipped.extend(result[2])

    def emit_now(line):
        print(line, end="", flush=True)

    if a.list or a.jobs == 1 or len(pages) < 2:  # one at a time: each result as it comes
        for runnable in pages:
            add(run_page(a, repo, build, runnable, emit_now))
    else:  # files at the same time, each one's results together when it finishes
        def page(runnable):
            lines = []
            return run_page(a, repo, build, runnable, lines.append), lines

        def commands(runnable):
            """Command lines to run: the files with more start first (the longest file started
            last would run alone at the end)."""
            return sum(len([l for l in b.script().split("\n") if l.strip()])
                       for b in runnable if not (b.mark and b.mark[0] == "skip"))

        with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
            todo = sorted(pages, key=lambda r: -commands(r))
            for fut in concurrent.futures.as_completed([pool.submit(page, r) for r in todo]):
                result, lines = fut.result()
                print("".join(lines), end="", flush=True)
                add(result)
    for e in errors:
        print("FAIL %s" % e)
    print("docs_test: %d blocks run, %d failed, %d skipped, %d fence errors, %.0f s" %
          (ran, len(failed), len(skipped), len(errors), time.time() - t_all))
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
