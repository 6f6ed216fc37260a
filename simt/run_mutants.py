#!/usr/bin/env python3
"""Shows that the emulated CUDA test suites catch real bugs: for each mutant of simt/mutants.txt,
builds the mutant's test binaries with that one kernel file mutated, runs the mutant's tests in
the suite's schedules, and reports the tests that failed. A mutant that no test catches fails
this script.

  run_mutants.py BUILD_DIR [-jN] [--every-schedule] [NAME ...]      (default: every mutant)
  run_mutants.py --check       only that every mutant applies: its file exists and its `find`
                               occurs `occurrence` times (seconds, no build: ctest simt_mutants.apply)

A mutant of a header (`file` a .cuh) names the kernel file compiled with it (`via`): that file is
compiled with a mutated copy of the header found first on the include path. A mutant of the
emulator itself (`file` a simt/*.cpp: the tensor-core instructions' model) is compiled as it is,
with its own command, and linked ahead of the library as a kernel file's is.

A mutant's `tests` names one or more suites, separated by white space (a value may go on over
indented lines):
  FILTER             a gtest filter of tests/test_cuda_ops (the op tests against the CPU backend)
  BINARY:FILTER      a gtest filter of another test binary of tests/, e.g.
                     test_kv_cache:AllCases/DecodeOps.*/cuda_*  or  test_cuda_memory:CudaGradAccumulation.*
The schedules are those tests/CMakeLists.txt registers the op tests in: forward, random:7 and
reverse. A mutant is done at the first schedule in which some test fails; --every-schedule runs
all three (the table of docs/emulation.md, which says which orders catch which race).

The build is the project's own (Ninja, compile_commands.json): the mutated file is rewritten by
simt/rewrite_cu.py and compiled with the exact command of the original, then linked into a copy
of each test binary ahead of the library, whose own object for that file is then not needed.
Mutants compile N at a time (-jN; default: every CPU) while the tests of those built run.
Exits 1 when a mutant is not caught, a filter runs no test, or a mutant's file is not in the
emulated build (a kernel file the build no longer compiles would otherwise go untested); 77
(ctest: skipped) only when the build has no SIMT emulator at all or is not a Ninja build.
"""
import concurrent.futures
import configparser
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEDULES = ["forward", "random:7", "reverse"]  # as tests/CMakeLists.txt registers test_cuda_ops
DEFAULT_BINARY = "test_cuda_ops"
SUITE = re.compile(r"^(test_\w+):(.+)$")

sys.path.insert(0, os.path.join(SOURCE, "simt"))
from rewrite_cu import mutate  # noqa: E402  (the one find-and-replace, for headers too)


def unescape(text):  # mutants.txt writes a line break as \n, as rewrite_cu.py reads it
    return text.encode().decode("unicode_escape")


def read_mutants():
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, comment_prefixes=("#",))
    parser.read(os.path.join(SOURCE, "simt", "mutants.txt"), encoding="utf-8")
    return [dict(parser[name], name=name) for name in parser.sections()]


def suites_of(mutant):
    """[(binary, gtest filter)] of a mutant's `tests`."""
    suites = []
    for item in mutant["tests"].split():
        m = SUITE.match(item)
        suites.append((m[1], m[2]) if m else (DEFAULT_BINARY, item))
    return suites


class Failed(Exception):
    """A mutant that cannot be built or tested: the message says which and why."""


def run(cmd, cwd, **kw):
    return subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def unappliable(mutants):
    """The lines saying which mutants no longer apply to their file (a kernel edited since)."""
    problems = []
    for m in mutants:
        path = os.path.join(SOURCE, m["file"])
        if not os.path.exists(path):
            problems.append(f"mutant {m['name']}: {m['file']} does not exist")
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            mutate(text, unescape(m["find"]), unescape(m["replace"]), int(m["occurrence"]), m["file"])
        except SystemExit as e:
            problems.append(f"mutant {m['name']}: cannot apply it: {e}")
    return problems


def main(argv):
    if argv[1:] == ["--check"]:
        mutants = read_mutants()
        problems = unappliable(mutants)
        print("\n".join(problems) if problems else f"all {len(mutants)} mutants apply to their files")
        return 1 if problems else 0
    every_schedule = "--every-schedule" in argv[1:]
    jobs = [int(a[2:]) for a in argv[1:] if re.fullmatch(r"-j[0-9]+", a)] or [os.cpu_count() or 1]
    jobs = max(jobs[-1], 1)
    args = [a for a in argv[1:] if a != "--every-schedule" and not re.fullmatch(r"-j[0-9]+", a)]
    if not args:
        sys.exit(__doc__)
    build = os.path.abspath(args[0])
    only = set(args[1:])
    commands_file = os.path.join(build, "compile_commands.json")
    if not os.path.exists(os.path.join(build, "build.ninja")) or not os.path.exists(commands_file):
        print("run_mutants: needs a Ninja build with compile_commands.json")
        return 77
    with open(commands_file, encoding="utf-8") as f:
        compile_commands = {os.path.normpath(c["file"]): c for c in json.load(f)}
    simt_gen = os.path.join(build, "simt_gen")
    if not any(path.startswith(simt_gen + os.sep) for path in compile_commands):
        print("run_mutants: this build has no SIMT emulator (nothing in simt_gen/)")
        return 77
    mutants = [m for m in read_mutants() if not only or m["name"] in only]
    unknown = only - {m["name"] for m in mutants}
    if unknown:
        print(f"run_mutants: no mutant named {', '.join(sorted(unknown))} in simt/mutants.txt")
        return 1

    def compiled_file(m):  # the .cu compiled with the mutant: its file, or for a header the one `via` names
        return m.get("via", m["file"])

    def emulator_file(m):  # a file of the emulator itself (simt/*.cpp): compiled as it is, not rewritten
        return compiled_file(m).endswith(".cpp")

    def generated_of(m):  # the emulated build's rewrite of that file (an emulator file: the file itself)
        if emulator_file(m):
            return os.path.normpath(os.path.join(SOURCE, compiled_file(m)))
        return os.path.normpath(os.path.join(simt_gen, os.path.basename(compiled_file(m))[:-3] + ".cpp"))

    problems = unappliable(mutants)  # before an hour of builds stops at the first one
    if problems:
        print("\n".join(problems))
        return 1
    for m in mutants:
        if generated_of(m) not in compile_commands:
            print(f"mutant {m['name']}: {compiled_file(m)} is not in the emulated build (no {generated_of(m)} in "
                  "compile_commands.json): its kernels go untested")
            return 1
    links = {}  # test binary -> its link command
    for binary in dict.fromkeys(b for m in mutants for b, _ in suites_of(m)):
        lines = run(["ninja", "-t", "commands", f"tests/{binary}"], build).stdout.strip().splitlines()
        if not lines or f"-o tests/{binary} " not in lines[-1] + " ":
            print(f"run_mutants: cannot find the link command of tests/{binary}")
            return 1
        links[binary] = lines[-1]

    def build_mutant(m, tmp):
        """Compiles the mutant and links its test binaries: {binary: path}; raises Failed."""
        name, source, generated = m["name"], os.path.join(SOURCE, compiled_file(m)), generated_of(m)
        mutated_cpp = os.path.join(tmp, name + ".cpp")
        obj = os.path.join(tmp, name + ".o")
        header = "via" in m  # a mutated header: a copy found first on the include path
        if emulator_file(m):
            with open(source, encoding="utf-8") as f:
                text = f.read()
            try:
                text = mutate(text, unescape(m["find"]), unescape(m["replace"]), int(m["occurrence"]), m["file"])
            except SystemExit as e:
                raise Failed(f"mutant {name}: cannot apply it: {e}")
            with open(mutated_cpp, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            mutation = [] if header else ["--mutate", m["find"], m["replace"], m["occurrence"]]
            r = run([sys.executable, os.path.join(SOURCE, "simt", "rewrite_cu.py"), source, mutated_cpp, *mutation],
                    build)
            if r.returncode != 0:
                raise Failed(f"mutant {name}: cannot apply it: {r.stdout.strip()}")
        # the original's compile command, on the mutated file
        entry = compile_commands[generated]
        cmd = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
        cmd = [mutated_cpp if os.path.normpath(os.path.join(entry["directory"], a)) == generated else a for a in cmd]
        if header:
            include = os.path.join(tmp, name + ".include")
            copy = os.path.join(include, m["file"])
            os.makedirs(os.path.dirname(copy), exist_ok=True)
            with open(os.path.join(SOURCE, m["file"]), encoding="utf-8") as f:
                text = mutate(f.read(), unescape(m["find"]), unescape(m["replace"]), int(m["occurrence"]), m["file"])
            with open(copy, "w", encoding="utf-8") as f:
                f.write(text)
            first_include = next(i for i, a in enumerate(cmd) if a.startswith("-I"))
            cmd.insert(first_include, "-I" + include)  # searched before the source tree's copy
        cmd[cmd.index("-o") + 1] = obj
        # -O1, not the build's -O3: a mutant's file compiles in 2.1 s of CPU instead of 3.5
        # (layernorm.cpp) and only its own kernels run slower. -fexpensive-optimizations (on
        # from -O2) keeps GCC's multiply-add fusion, which -ffp-contract=fast asks for in the
        # emulated kernels and which -O1 alone skips: a mutant that unrounds a shared formula
        # (mul_rn, kernels/common/host_device.h) then fuses as in the build.
        cmd = [x for a in cmd for x in (["-O1", "-fexpensive-optimizations"] if re.fullmatch(r"-O[0-9s]", a) else [a])]
        r = run(cmd, entry["directory"])
        if r.returncode != 0:
            raise Failed(f"mutant {name}: the compile failed:\n{r.stdout}")
        exes = {}
        for binary in dict.fromkeys(b for b, _ in suites_of(m)):
            link = links[binary]
            exes[binary] = os.path.join(tmp, f"{binary}.{name}")
            r = run(link.replace(f"-o tests/{binary}", f"{obj} -o {exes[binary]}"), build, shell=True)
            if r.returncode != 0:
                raise Failed(f"mutant {name}: the link of {binary} failed:\n{r.stdout}")
        return exes

    def test_mutant(m, exes):
        """[(schedule, failed tests, what the emulator said)] of the schedules that caught it."""
        caught = []
        for schedule in SCHEDULES:
            env = dict(os.environ, TINYTRAIN_SIMT_SCHEDULE=schedule, TINYTRAIN_TEST_CUDA="emulated")
            failed, said = [], []
            for binary, test_filter in suites_of(m):
                r = run([exes[binary], "--gtest_filter=" + test_filter], build, env=env, timeout=900)
                if re.search(r"^\[==========\] 0 tests from", r.stdout, re.M):
                    raise Failed(f"mutant {m['name']}: {binary}:{test_filter} runs no test")
                names = sorted(set(re.findall(r"^\[  FAILED  \] (\S+?)(?:,| \(|$)", r.stdout, re.M)))
                if r.returncode != 0 and not names:
                    names = [f"({binary} exited with {r.returncode})"]
                failed += names
                said += re.findall(r"^simt: (.*)$", r.stdout, re.M)
            if failed:
                caught.append((schedule, failed, said))
                if not every_schedule:
                    break
        return caught

    missed = []
    started = time.monotonic()
    # Mutants compile and link in parallel (jobs at once) while the tests of the finished ones run.
    with tempfile.TemporaryDirectory(prefix="simt-mutants-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        builds = [pool.submit(build_mutant, m, tmp) for m in mutants]
        try:
            for m, built in zip(mutants, builds):
                exes = built.result()
                caught = test_mutant(m, exes)
                for exe in exes.values():
                    os.remove(exe)
                if caught:
                    print(f"mutant {m['name']}: caught", flush=True)
                    for schedule, failed, said in caught:
                        print(f"  schedule {schedule}: {len(failed)} failed, e.g. {failed[0]}")
                        if said:
                            print(f"    the emulator: {said[0][:300]}")
                else:
                    print(f"mutant {m['name']}: NOT CAUGHT by {m['tests']}", flush=True)
                    missed.append(m["name"])
        except Failed as e:
            pool.shutdown(cancel_futures=True)
            print(e)
            return 1
    print(f"{len(mutants) - len(missed)} of {len(mutants)} mutants caught ({time.monotonic() - started:.0f} s)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
