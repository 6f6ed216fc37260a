#!/usr/bin/env python3
"""The verdict of scripts/gpu_check.sh, rewritten after every step (scripts/gpu_check_lib.sh).

Usage: python3 scripts/gpu_check_summary.py OUT [--print]

Reads, in the results folder OUT:
  plan.txt          the planned steps in the order they run, one name a line
  steps.tsv         one line per step that ran or was passed over: name, exit code ("-": none),
                    seconds, status (pass | fail | timeout | skipped | left_out), limit in
                    seconds, note
  steps/NAME.log    each step's full output
  gpu_required.txt  the ctest tests labelled gpu_required (`ctest -N -L gpu_required`), when a
                    ctest step wrote it
Writes OUT/summary.json and OUT/summary.txt (each to a temporary name, then renamed, so a
reader never sees half a file): one row per planned step, and last the verdict line
  PASS | passed (N): a, b | failed (0): none | not run (0): none
  PROBLEMS | passed (N): a | failed (M): b (timed out at its 30 s limit), ... | not run (K): c (time budget spent), ...
which is also summary.json's last member, "verdict". --print prints summary.txt.
Exit status 0 when no step failed and every planned step ran or was left out on purpose
(GPU_CHECK_SKIP_BUILD, GPU_CHECK_ONLY); 1 otherwise.

A step passes when it exited 0 and its log shows no problem:
  - ctest result lines (`12/282 Test  #7: Name ....   Passed    0.33 sec`): a test that failed
    (or timed out, crashed, did not run) fails the step, and so does a skipped test named in
    gpu_required.txt. Other skips are listed and do not: the tests that need a machine without
    a GPU skip on a GPU machine on purpose (tests/test_cli.cpp, tests/test_doctor.cpp).
    Disabled tests (gtest's DISABLED_, "Not Run (Disabled)") are listed only.
  - `gpu_check.number KEY VALUE` lines are the step's key numbers (a float when VALUE parses).
Exit codes 124 and 137 at the step's limit are `timeout` killing it (TERM, then KILL).
"""
import json
import os
import re
import sys

# `12/282 Test  #7: Name ....   Passed    0.33 sec` (or ***Skipped, ***Failed, ***Timeout,
# ***Exception: SegFault, ***Not Run, ***Not Run (Disabled) for a gtest DISABLED_ test): the
# last status before the time is the status, whatever the test's name holds.
CTEST_RESULT = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (\S+)(?: .*)?[ .](?:\*\*\*)?"
                          r"((?:Passed|Failed|Skipped|Timeout|Exception|Not Run)\b(?: \(Disabled\))?)[^\n]*?\s[0-9.]+ sec\s*$",
                          re.M)
DISABLED = "Not Run (Disabled)"
NUMBER = re.compile(r"^gpu_check\.number (\S+) (.*?)\s*$", re.M)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def value(text):
    try:
        return float(text)
    except ValueError:
        return text


def ctest_results(log, gpu_required):
    """The ctest results in a step's log, or None when it has none."""
    results = {m.group(1): m.group(2) for m in CTEST_RESULT.finditer(log)}
    if not results:
        return None
    failed = sorted(n for n, r in results.items() if r not in ("Passed", "Skipped", DISABLED))
    skipped = sorted(n for n, r in results.items() if r == "Skipped")
    return {"ran": len(results),
            "passed": sum(r == "Passed" for r in results.values()),
            "failed": [f"{n} ({results[n]})" for n in failed],
            "skipped": skipped,
            "disabled": sorted(n for n, r in results.items() if r == DISABLED),
            "gpu_required_ran": sum(n in gpu_required for n in results),
            "gpu_required_skipped": [n for n in skipped if n in gpu_required],
            "finished": bool(re.search(r"\d+% tests passed, \d+ tests? failed out of \d+", log))}


def step_row(fields, out, gpu_required):
    name, rc, secs, status, limit, note = (fields + [""] * 6)[:6]
    row = {"name": name, "status": status, "exit_code": int(rc) if rc not in ("", "-") else None,
           "seconds": float(secs or 0), "limit_s": int(limit or 0), "log": f"steps/{name}.log"}
    if note:
        row["note"] = note
    log = read(os.path.join(out, "steps", name + ".log"))
    numbers = {m.group(1): value(m.group(2)) for m in NUMBER.finditer(log)}
    ctest = ctest_results(log, gpu_required)
    if ctest:
        numbers["ctest"] = ctest
    if numbers:
        row["numbers"] = numbers
    # Why it failed, in a few words; None: it passed; "": it did not run.
    if status in ("skipped", "left_out"):
        row["verdict"], row["why"] = "not run", note or status
    elif status == "timeout":
        row["verdict"], row["why"] = "failed", f"timed out at its {row['limit_s']} s limit"
    elif status != "pass":
        row["verdict"], row["why"] = "failed", f"exit {rc}"
    else:
        row["verdict"], row["why"] = "passed", ""
    if status in ("skipped", "left_out") or not ctest:
        return row
    for names, what in ((ctest["failed"], "failed"), (ctest["gpu_required_skipped"], "skipped")):
        if names:
            n = len(names)
            row["verdict"] = "failed"
            row["why"] = ", ".join(filter(None, [row["why"], f"{n} {'gpu_required ' * (what == 'skipped')}test"
                                                 f"{'s' * (n > 1)} {what}: " + " ".join(names[:5]) + " ..." * (n > 5)]))
    return row


def summarise(out):
    plan = [line.strip() for line in read(os.path.join(out, "plan.txt")).splitlines() if line.strip()]
    gpu_required = set(line.strip() for line in read(os.path.join(out, "gpu_required.txt")).splitlines())
    rows = {}
    for line in read(os.path.join(out, "steps.tsv")).splitlines():
        if line.strip():
            row = step_row(line.split("\t"), out, gpu_required)
            rows[row["name"]] = row
    steps = [rows[n] for n in plan if n in rows] + [r for n, r in rows.items() if n not in plan]
    for name in plan:
        if name not in rows:
            steps.append({"name": name, "status": "not_reached", "verdict": "not run",
                          "why": "not reached: the run ended or was cut short before it"})
    passed = [s["name"] for s in steps if s["verdict"] == "passed"]
    failed = [f"{s['name']} ({s['why']})" for s in steps if s["verdict"] == "failed"]
    not_run = [f"{s['name']} ({s['why']})" for s in steps if s["verdict"] == "not run"]
    ok = not failed and all(s["status"] == "left_out" for s in steps if s["verdict"] == "not run")
    # The steps not run, grouped by why, in order: "a, b (why); c (other why)".
    why_not_run = {}
    for s in steps:
        if s["verdict"] == "not run":
            why_not_run.setdefault(s["why"], []).append(s["name"])
    verdict = (f"{'PASS' if ok else 'PROBLEMS'} | passed ({len(passed)}): {', '.join(passed) or 'none'}"
               f" | failed ({len(failed)}): {', '.join(failed) or 'none'}"
               f" | not run ({len(not_run)}): "
               + ("; ".join(f"{', '.join(names)} ({why})" for why, names in why_not_run.items()) or "none"))
    summary = {"results_folder": out, "ok": ok, "steps": steps,
               "passed": passed, "failed": failed, "not_run": not_run, "verdict": verdict}
    table = [f"{'step':<24} {'verdict':<8} {'seconds':>7} {'limit':>5}  why / key numbers"]
    for s in steps:
        nums = {k: v for k, v in s.get("numbers", {}).items() if k != "ctest"}
        ct = s.get("numbers", {}).get("ctest")
        if ct:
            nums.update(ran=ct["ran"], passed=ct["passed"], failed=len(ct["failed"]), skipped=len(ct["skipped"]))
        detail = "; ".join(filter(None, [s["why"], " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                                              for k, v in nums.items())]))
        table.append(f"{s['name']:<24} {s['verdict']:<8} {s.get('seconds', 0):7.1f} {s.get('limit_s', 0):5d}  {detail}")
    table.append(verdict)
    for name, text in (("summary.json", json.dumps(summary, indent=2) + "\n"), ("summary.txt", "\n".join(table) + "\n")):
        with open(os.path.join(out, name + ".tmp"), "w") as f:
            f.write(text)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))
    return ok, table


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] != "--print"):
        sys.exit("usage: gpu_check_summary.py OUT [--print]")
    ok, table = summarise(os.path.abspath(argv[1]))
    if len(argv) == 3:
        print("\n".join(table))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
