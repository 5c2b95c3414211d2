#!/usr/bin/env python3
"""bench/unfreeze_bench.sh's helper (standard library only).

  unfreeze_report.py time --facts FILE --side S --precision P --unfreeze U --repeat R --order K
                          --log FILE [--json FILE] -- COMMAND...
      runs COMMAND (one process: one side's step of one configuration), and appends one line to
      FILE: the side, the configuration, its place in the run, the wall seconds, /proc/loadavg
      before and after, the exit status and the step's JSON (--json FILE: read from that file,
      pets_bench's --report; else the last JSON line of COMMAND's stdout). Exit status COMMAND's.

  unfreeze_report.py report --facts FILE --report OUT [--setting KEY=VALUE ...]
      gathers the lines into the JSON report OUT and prints the Markdown tables on stdout.

Per configuration (precision.unfreeze) and side: images/s of each repeat (each the mean over that
process's timed steps), their median, min and max; the peak resident memory of each process (MiB);
the phases of the step (median over the repeats). Ratios ours / PyTorch per repeat (the two
processes of one repeat run back to back), their median, min and max.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

SIDES = {
    "ours": "ours (pets_bench --step-only)",
    "pytorch": "PyTorch eager (python_step.py), glibc's default allocator",
    "pytorch_retain": "PyTorch eager (python_step.py), GLIBC_TUNABLES as pets_train's allocator",
}


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def cmd_time(a, command):
    before = loadavg()
    start = time.monotonic()
    with open(a.log, "w") as log:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True)
    wall = time.monotonic() - start
    with open(a.log, "a") as log:
        log.write(proc.stdout)
    result = None
    if proc.returncode == 0:
        try:
            if a.json:
                with open(a.json) as f:
                    result = json.load(f)["step_only"]
            else:
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
                result = json.loads(lines[-1])
        except (OSError, ValueError, KeyError, IndexError) as e:
            print(f"unfreeze_report.py: no step JSON from {command[0]}: {e}", file=sys.stderr)
            proc.returncode = proc.returncode or 1
    fact = {"side": a.side, "precision": a.precision, "unfreeze": a.unfreeze, "repeat": a.repeat,
            "order": a.order, "wall_seconds": wall, "loadavg_before": before,
            "loadavg_after": loadavg(), "rc": proc.returncode, "result": result}
    with open(a.facts, "a") as f:
        f.write(json.dumps(fact) + "\n")
    return proc.returncode


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values), "values": values}


def phases_of(side, result):
    """The step's phases in seconds, on common keys: forward_backward (zero_grad, the forward, the
    loss, backward; ours also the gradients' copies into the allreduce buffer), allreduce (ours
    only: the one-rank allreduce and the averaged gradients put back), optimizer (Adam, the
    schedule); and where measured: frozen_forward, trained_forward (with fc and the loss),
    backward (the rest of forward_backward)."""
    p = result.get("phases_seconds") or {}
    if side == "ours":
        out = {"forward_backward": p.get("forward_backward"), "allreduce": p.get("allreduce"),
               "optimizer": p.get("optimizer")}
        if "forward_alone" in p:
            out["frozen_forward"] = p["frozen_forward_alone"]
            out["trained_forward"] = p["forward_alone"] - p["frozen_forward_alone"]
            out["backward"] = p["forward_backward"] - p["forward_alone"]
        return out
    return {"forward_backward": sum(p[k] for k in ("zero_grad", "frozen_forward",
                                                   "trained_forward", "backward")),
            "allreduce": 0.0, "optimizer": p["optimizer"], "frozen_forward": p["frozen_forward"],
            "trained_forward": p["trained_forward"], "backward": p["backward"] + p["zero_grad"]}


def cmd_report(a):
    facts = []
    with open(a.facts) as f:
        for line in f:
            if line.strip():
                facts.append(json.loads(line))
    configs = []
    for fact in facts:
        key = f"{fact['precision']}.{fact['unfreeze']}"
        if key not in configs:
            configs.append(key)
    sides = [s for s in SIDES if any(f["side"] == s for f in facts)]
    summary = {}
    for key in configs:
        precision, unfreeze = key.split(".")
        entry = {"precision": precision, "unfreeze": unfreeze, "sides": {}, "ratios": {}}
        per_repeat = {}
        for side in sides:
            runs = [f for f in facts if f["side"] == side and f"{f['precision']}.{f['unfreeze']}"
                    == key]
            ok = [f for f in runs if f["rc"] == 0 and f["result"]]
            for f in ok:
                per_repeat.setdefault(side, {})[f["repeat"]] = f["result"]["images_per_s"]
            phase_lists = {}
            for f in ok:
                for k, v in phases_of(side, f["result"]).items():
                    phase_lists.setdefault(k, []).append(v)
            entry["sides"][side] = {
                "runs": len(runs), "failed": len(runs) - len(ok),
                "images_per_s": spread([f["result"]["images_per_s"] for f in ok]),
                "step_seconds": [f["result"]["step_seconds"] for f in ok],
                "steps_per_run": ok[0]["result"]["steps"] if ok else None,
                "peak_rss_mib": spread([f["result"]["maxrss_kib"] / 1024 for f in ok]),
                "phases_seconds_median": {k: statistics.median(v) for k, v in phase_lists.items()},
                "trained_parameters": ok[0]["result"].get("trained_parameters") if ok else None,
            }
            if side == "ours" and ok and "maxrss_kib_before_step" in ok[0]["result"]:
                entry["sides"][side]["peak_rss_mib_before_step"] = spread(
                    [f["result"]["maxrss_kib_before_step"] / 1024 for f in ok])
        for other in sides:
            if other == "ours" or "ours" not in per_repeat or other not in per_repeat:
                continue
            ratios = [per_repeat["ours"][r] / per_repeat[other][r]
                      for r in sorted(per_repeat["ours"]) if r in per_repeat[other]]
            entry["ratios"][f"ours_over_{other}"] = spread(ratios)
        summary[key] = entry
    settings = dict(s.split("=", 1) for s in a.setting)
    report = {
        "schema": "unfreeze_bench/1",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "settings": settings, "sides": {s: SIDES[s] for s in sides},
        "summary": summary, "runs": facts,
        "failed_runs": sum(1 for f in facts if f["rc"] != 0 or not f["result"]),
        "loadavg_during_runs": spread([f["loadavg_before"][0] for f in facts]),
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.report)), exist_ok=True)
    with open(a.report, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print_tables(summary, sides)
    return 1 if report["failed_runs"] else 0


def fmt(s, digits=2):
    if not s:
        return "–"
    if s["n"] == 1:
        return f"{s['median']:.{digits}f}"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def print_tables(summary, sides):
    others = [s for s in sides if s != "ours"]
    head = ["step", "ours img/s"]
    for o in others:
        head += [f"{o} img/s", f"ours/{o}"]
    head += [f"peak RSS {s}, MiB" for s in sides]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for key, e in summary.items():
        row = [key, fmt(e["sides"].get("ours", {}).get("images_per_s"))]
        for o in others:
            row += [fmt(e["sides"][o]["images_per_s"]), fmt(e["ratios"].get(f"ours_over_{o}"), 3)]
        row += [fmt(e["sides"][s]["peak_rss_mib"], 0) for s in sides]
        print("| " + " | ".join(row) + " |")
    print()
    cols = ["frozen_forward", "trained_forward", "backward", "forward_backward", "allreduce",
            "optimizer"]
    print("| step | side | " + " | ".join(c.replace("_", " ") + ", s" for c in cols) + " |")
    print("|---|---|" + "|".join(["---:"] * len(cols)) + "|")
    for key, e in summary.items():
        for side in sides:
            p = e["sides"][side]["phases_seconds_median"]
            print(f"| {key} | {side} | " + " | ".join(
                f"{p[c]:.3f}" if p.get(c) is not None else "–" for c in cols) + " |")


def main():
    argv = sys.argv[1:]
    command = []
    if "--" in argv:
        command = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    t = sub.add_parser("time")
    t.add_argument("--facts", required=True)
    t.add_argument("--side", required=True, choices=sorted(SIDES))
    t.add_argument("--precision", required=True)
    t.add_argument("--unfreeze", required=True)
    t.add_argument("--repeat", type=int, required=True)
    t.add_argument("--order", type=int, required=True)
    t.add_argument("--log", required=True)
    t.add_argument("--json")
    r = sub.add_parser("report")
    r.add_argument("--facts", required=True)
    r.add_argument("--report", required=True)
    r.add_argument("--setting", action="append", default=[])
    a = p.parse_args(argv)
    if a.what == "time":
        if not command:
            p.error("time needs -- COMMAND")
        return cmd_time(a, command)
    return cmd_report(a)


if __name__ == "__main__":
    sys.exit(main())
