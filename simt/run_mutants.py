#!/usr/bin/env python3
"""Shows that the emulated CUDA test suite catches real bugs: for each mutant of
simt/mutants.txt, builds tests/test_cuda_ops with that one kernel file mutated, runs the
mutant's tests in each schedule of the suite, and reports the tests that failed. A mutant
that no test catches fails this script.

  run_mutants.py BUILD_DIR [NAME ...]      (default: every mutant)

The build is the project's own (Ninja, compile_commands.json): the mutated file is rewritten
by simt/rewrite_cu.py and compiled with the exact command of the original, then linked into a
copy of test_cuda_ops ahead of the library, whose own object for that file is then not needed.
Exits 77 (ctest: skipped) when the build has no SIMT emulator or is not a Ninja build.
"""
import configparser
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEDULES = ["forward", "random:7", "reverse"]  # as tests/CMakeLists.txt registers test_cuda_ops


def read_mutants():
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, comment_prefixes=("#",))
    parser.read(os.path.join(SOURCE, "simt", "mutants.txt"), encoding="utf-8")
    return [dict(parser[name], name=name) for name in parser.sections()]


def run(cmd, cwd, **kw):
    return subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    build = os.path.abspath(argv[1])
    only = set(argv[2:])
    commands_file = os.path.join(build, "compile_commands.json")
    if not os.path.exists(os.path.join(build, "build.ninja")) or not os.path.exists(commands_file):
        print("run_mutants: needs a Ninja build with compile_commands.json")
        return 77
    with open(commands_file, encoding="utf-8") as f:
        compile_commands = {os.path.normpath(c["file"]): c for c in json.load(f)}
    link = run(["ninja", "-t", "commands", "tests/test_cuda_ops"], build).stdout.strip().splitlines()[-1]
    if "-o tests/test_cuda_ops" not in link:
        print("run_mutants: cannot find the link command of tests/test_cuda_ops")
        return 1
    mutants = [m for m in read_mutants() if not only or m["name"] in only]
    missed = []
    with tempfile.TemporaryDirectory(prefix="simt-mutants-") as tmp:
        for m in mutants:
            name, source = m["name"], os.path.join(SOURCE, m["file"])
            generated = os.path.normpath(os.path.join(build, "simt_gen", os.path.basename(source)[:-3] + ".cpp"))
            if generated not in compile_commands:
                print(f"run_mutants: {generated} is not in the build (no SIMT emulator?)")
                return 77
            mutated_cpp = os.path.join(tmp, name + ".cpp")
            obj = os.path.join(tmp, name + ".o")
            exe = os.path.join(tmp, "test_cuda_ops." + name)
            r = run([sys.executable, os.path.join(SOURCE, "simt", "rewrite_cu.py"), source, mutated_cpp, "--mutate",
                     m["find"], m["replace"], m["occurrence"]], build)
            if r.returncode != 0:
                print(f"mutant {name}: cannot apply it: {r.stdout.strip()}")
                return 1
            # the original's compile command, on the mutated file
            entry = compile_commands[generated]
            args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
            args = [mutated_cpp if os.path.normpath(os.path.join(entry["directory"], a)) == generated else a
                    for a in args]
            args[args.index("-o") + 1] = obj
            for step, cmd, cwd in (("compile", args, entry["directory"]),
                                   ("link", link.replace("-o tests/test_cuda_ops", f"{obj} -o {exe}"), build)):
                r = run(cmd, cwd, shell=isinstance(cmd, str))
                if r.returncode != 0:
                    print(f"mutant {name}: the {step} failed:\n{r.stdout}")
                    return 1
            caught = []
            for schedule in SCHEDULES:
                env = dict(os.environ, TINYTRAIN_SIMT_SCHEDULE=schedule, TINYTRAIN_TEST_CUDA="emulated")
                r = run([exe, "--gtest_filter=" + m["tests"]], build, env=env, timeout=900)
                failed = sorted(set(re.findall(r"^\[  FAILED  \] (\S+?)(?:,| \(|$)", r.stdout, re.M)))
                said = re.findall(r"^simt: (.*)$", r.stdout, re.M)
                if r.returncode != 0 and not failed:
                    failed = [f"(the test binary exited with {r.returncode})"]
                if failed:
                    caught.append((schedule, failed, said))
            if caught:
                print(f"mutant {name}: caught")
                for schedule, failed, said in caught:
                    print(f"  schedule {schedule}: {len(failed)} failed, e.g. {failed[0]}")
                    if said:
                        print(f"    the emulator: {said[0][:300]}")
            else:
                print(f"mutant {name}: NOT CAUGHT by {m['tests']}")
                missed.append(name)
            os.remove(exe)
    print(f"{len(mutants) - len(missed)} of {len(mutants)} mutants caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
