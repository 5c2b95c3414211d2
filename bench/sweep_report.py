#!/usr/bin/env python3
"""The measurement and report of a --max-lr sweep against a single head (bench/sweep_bench.sh,
and the device check's sweep_heads part): pets_train runs that differ only in --max-lr, timed as
whole processes in pairs, and their figures read from the run folders.

    sweep_report.py time --facts FILE --label single|sweep --pair N --max-lr LIST --run DIR
                         --log FILE [--drop-models] [--deadline T] -- COMMAND...
    sweep_report.py report --facts FILE --report FILE --sweep LIST --single VALUE [--device D]
                           [--setting KEY=VALUE]...

`time` runs COMMAND (its stdout and stderr into --log), then appends one JSON line to --facts:
the wall seconds, the user and system CPU seconds of the whole process tree (mpirun and the
ranks it reaped), the load average before and after and the exit status. --drop-models removes
the run folder's *.safetensors afterwards (the figures need only metrics.jsonl, confusion.json
and the log). --deadline T (seconds since the epoch): COMMAND is not run, and nothing recorded,
when a run as long as the longest in --facts would end after T. Exits with COMMAND's status.

`report` reads every line of --facts (pair 0: warm-up runs, not counted), each run's
metrics.jsonl, confusion.json and log, and writes the JSON report (schema pets_sweep_bench/1) and
a table on stderr. Per counted pair: the sweep's wall time over the single head's (wall_ratio),
the same for the training seconds of all epochs (train_ratio, metrics.jsonl's train_seconds) and
for the CPU seconds (cpu_ratio); summary: their medians, min and max, bytes_per_step of each side
(their ratio, the bytes each added head adds, and head_gradient_bytes: fc's gradients of the
heads as float64, the bulk of a step's sums), and added_head_share, the training time one more
head adds as a share of the single head's training time: (sweep - single) / ((heads - 1) *
single), a head's own share of the step when every head costs the same. Checks (problems
listed, the figures still reported): the sweep run reports one head per --max-lr value in
`heads` and its stderr one line per head and epoch; `class_accuracy` is in every epoch;
confusion.json has a matrix per head whose counts sum to the held-out images. Exits 1 when a
counted run failed or the sweep did not train its heads (its ratio would not be one of 8 heads
against 1), else 0.

Python 3.8 or newer, standard library only (the device check runs it on a GPU node).
"""
import argparse
import json
import math
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time

TARGET_WALL_RATIO = 1.10
FEATURES = 2048  # ResNet-50d's pooled features: each head is fc [classes, 2048] + bias
HEAD_LINE = re.compile(r"^\[epoch (\d+)\] head (\d+) max-lr (\S+): loss ", re.M)


def parse_values(text):
    return [float(v) for v in text.split(",") if v.strip()]


def load():
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


# ---- time -----------------------------------------------------------------------------------

def time_command(a):
    if a.deadline:
        # Another run only when it can end in time: as long as the longest run so far.
        longest = max([f["wall_s"] for f in read_jsonl(a.facts)] or [0.0])
        if time.time() + longest > a.deadline:
            print("sweep_report: %s (pair %d) skipped: a run of %.0f s would end after the deadline"
                  % (a.label, a.pair, longest), file=sys.stderr)
            return 0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = load()
    os.makedirs(os.path.dirname(os.path.abspath(a.log)), exist_ok=True)
    start = time.monotonic()
    with open(a.log, "w") as log:
        try:
            rc = subprocess.run(a.command, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT).returncode
        except OSError as e:
            log.write("sweep_report: cannot run %s: %s\n" % (a.command[0], e))
            rc = 127
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if a.drop_models and os.path.isdir(a.run):
        for name in os.listdir(a.run):
            if name.endswith(".safetensors"):
                os.remove(os.path.join(a.run, name))
    fact = {"label": a.label, "pair": a.pair, "max_lr": a.max_lr, "heads": len(parse_values(a.max_lr)),
            "run": a.run, "log": a.log, "rc": rc, "wall_s": round(wall, 3),
            "user_s": round(after.ru_utime - before.ru_utime, 3),
            "sys_s": round(after.ru_stime - before.ru_stime, 3),
            "load_before": load_before, "load_after": load(),
            "command": " ".join(a.command)}
    with open(a.facts, "a") as f:
        f.write(json.dumps(fact) + "\n")
    print("sweep_report: %s (pair %d, %d head%s): %.1f s wall, status %d"
          % (a.label, a.pair, fact["heads"], "" if fact["heads"] == 1 else "s", wall, rc), file=sys.stderr)
    return rc


# ---- figures of one run ---------------------------------------------------------------------

def read_jsonl(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        return []


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def confusion_figures(confusion, last):
    """What confusion.json holds, checked against the final epoch's metrics.jsonl line."""
    if confusion is None:
        return {"present": False}
    labels = confusion.get("labels") or []
    heads = confusion.get("heads") or []
    n = len(labels)
    shapes_ok = bool(heads) and all(
        len(h.get("matrix") or []) == n and all(len(row) == n for row in h["matrix"]) for h in heads)
    sums = [sum(sum(row) for row in h.get("matrix") or []) for h in heads]
    evaluated = (last or {}).get("evaluated")
    return {"present": True, "epoch": confusion.get("epoch"), "labels": n, "heads": len(heads),
            "chosen": confusion.get("chosen"), "matrix_shapes_ok": shapes_ok, "matrix_sums": sums,
            "sums_equal_evaluated": (evaluated is not None and bool(sums)
                                     and all(s == evaluated for s in sums)),
            "max_lr": [h.get("max_lr") for h in heads]}


def run_figures(fact):
    """The figures of one timed run: its facts line plus what its folder and log say."""
    rows = read_jsonl(os.path.join(fact["run"], "metrics.jsonl"))
    try:
        with open(fact["log"], errors="replace") as f:
            log = f.read()
    except OSError:
        log = ""
    fig = dict(fact)
    fig["epochs"] = len(rows)
    if not rows:
        fig["log_tail"] = log[-1500:]
        return fig
    last = rows[-1]
    train = sum(r.get("train_seconds") or 0.0 for r in rows)
    evals = sum(r.get("eval_seconds") or 0.0 for r in rows)
    shares = [(r.get("comm_share"), r.get("train_seconds") or 0.0) for r in rows]
    weighted = [(s, t) for s, t in shares if s is not None]
    bytes_values = sorted({r.get("bytes_per_step") for r in rows if r.get("bytes_per_step") is not None})
    heads = last.get("heads")
    fig.update({
        "train_seconds": round(train, 4), "eval_seconds": round(evals, 4),
        "outside_epochs_seconds": round(fact["wall_s"] - train - evals, 3),
        "cpu_s": round(fact["user_s"] + fact["sys_s"], 3),
        "train_images_per_s": [r.get("train_images_per_s") for r in rows],
        "accuracy": [r.get("accuracy") for r in rows],
        "bytes_per_step": last.get("bytes_per_step"),
        "bytes_per_step_values": bytes_values,
        "comm_share": (sum(s * t for s, t in weighted) / sum(t for _, t in weighted)
                       if weighted and sum(t for _, t in weighted) > 0 else None),
        "reported_head": [r.get("head") for r in rows] if any("head" in r for r in rows) else None,
        "heads_reported": len(heads) if isinstance(heads, list) else None,
        "heads_max_lr": [h.get("max_lr") for h in heads] if isinstance(heads, list) else None,
        "heads_final_accuracy": [h.get("accuracy") for h in heads] if isinstance(heads, list) else None,
        "class_accuracy_every_epoch": all(isinstance(r.get("class_accuracy"), dict) for r in rows),
        "stderr_head_lines": len(HEAD_LINE.findall(log)),
        "confusion": confusion_figures(read_json(os.path.join(fact["run"], "confusion.json")), last),
    })
    return fig


# ---- the report -----------------------------------------------------------------------------

def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def same_values(a, b):
    return a is not None and len(a) == len(b) and all(
        x is not None and math.isclose(float(x), y, rel_tol=1e-6) for x, y in zip(a, b))


def checks_of(run, values):
    """Problems of one run against what --max-lr asked of it."""
    problems = []
    name = "%s run" % run["label"]
    heads = len(values)
    if run["rc"] != 0:
        return ["%s: exit status %d (its log: %s)" % (name, run["rc"], run["log"])]
    if run["epochs"] == 0:
        return ["%s: no metrics.jsonl" % name]
    if heads > 1:
        if run["heads_reported"] != heads:
            problems.append("%s: metrics.jsonl reports %s heads, --max-lr gave %d"
                            % (name, run["heads_reported"], heads))
        elif not same_values(run["heads_max_lr"], values):
            problems.append("%s: the heads' max_lr %s are not --max-lr's %s"
                            % (name, run["heads_max_lr"], values))
        if run["stderr_head_lines"] != heads * run["epochs"]:
            problems.append("%s: %d per-head lines on stderr, want %d (one per head and epoch)"
                            % (name, run["stderr_head_lines"], heads * run["epochs"]))
        if run["reported_head"] is None:
            problems.append("%s: metrics.jsonl has no \"head\"" % name)
    elif run["heads_reported"] is not None:
        problems.append("%s: one --max-lr value, but metrics.jsonl has \"heads\"" % name)
    if not run["class_accuracy_every_epoch"]:
        problems.append("%s: metrics.jsonl lacks class_accuracy" % name)
    c = run["confusion"]
    if not c["present"]:
        problems.append("%s: no confusion.json" % name)
    else:
        if c["heads"] != heads:
            problems.append("%s: confusion.json has %d heads, want %d" % (name, c["heads"], heads))
        if not c["matrix_shapes_ok"]:
            problems.append("%s: a confusion matrix is not labels x labels" % name)
        if not c["sums_equal_evaluated"]:
            problems.append("%s: confusion counts %s, not the held-out images evaluated"
                            % (name, c["matrix_sums"]))
        if c["epoch"] != run["epochs"] - 1:
            problems.append("%s: confusion.json is of epoch %s, not the final %d"
                            % (name, c["epoch"], run["epochs"] - 1))
    return problems


def summarise(facts, sweep, single, classes=None):
    """The report's figures from the facts lines: runs, pairs, summary, problems. `classes`: the
    store's label count, when confusion.json does not give it."""
    runs = [run_figures(f) for f in facts]
    counted = [r for r in runs if r["pair"] > 0]
    # The same problem of several runs once, naming the runs.
    seen = {}
    for r in runs:
        for problem in checks_of(r, sweep if r["label"] == "sweep" else single):
            seen.setdefault(problem, []).append("%s-%d" % (r["label"], r["pair"]))
    problems = ["%s (%s)" % (p, ", ".join(names)) for p, names in seen.items()]
    pairs = []
    for p in sorted({r["pair"] for r in counted}):
        one = [r for r in counted if r["pair"] == p and r["label"] == "single"]
        many = [r for r in counted if r["pair"] == p and r["label"] == "sweep"]
        if not one or not many:
            continue
        a, b = one[0], many[0]
        row = {"pair": p, "first": "single" if runs.index(a) < runs.index(b) else "sweep",
               "single_wall_s": a["wall_s"], "sweep_wall_s": b["wall_s"]}
        if a["rc"] == 0 and b["rc"] == 0:
            row["wall_ratio"] = b["wall_s"] / a["wall_s"]
            row["cpu_ratio"] = b["cpu_s"] / a["cpu_s"] if a.get("cpu_s") else None
            if a.get("train_seconds") and b.get("train_seconds") is not None:
                row["single_train_s"], row["sweep_train_s"] = a["train_seconds"], b["train_seconds"]
                row["train_ratio"] = b["train_seconds"] / a["train_seconds"]
                if len(sweep) > len(single):
                    row["added_head_share"] = ((b["train_seconds"] - a["train_seconds"])
                                               / ((len(sweep) - len(single)) * a["train_seconds"]))
        pairs.append(row)
    ok_pairs = [p for p in pairs if "wall_ratio" in p]

    def side(label, heads):
        rs = [r for r in counted if r["label"] == label and r["rc"] == 0 and r["epochs"]]
        if not rs:
            return {"heads": heads, "runs": 0}
        labels = next((r["confusion"]["labels"] for r in rs if r["confusion"].get("present")), classes)
        return {"heads": heads, "runs": len(rs), "classes": labels,
                "wall_s": spread([r["wall_s"] for r in rs]),
                "train_seconds": spread([r["train_seconds"] for r in rs]),
                "outside_epochs_seconds": spread([r["outside_epochs_seconds"] for r in rs]),
                "bytes_per_step": rs[-1]["bytes_per_step"],
                # fc's weight and bias gradients of every head, float64: the bulk of the step's sums
                "head_gradient_bytes": 8 * heads * (FEATURES + 1) * labels if labels else None,
                "comm_share": spread([r["comm_share"] for r in rs]),
                "final_accuracy": rs[-1]["accuracy"][-1] if rs[-1]["accuracy"] else None}

    s_one, s_many = side("single", len(single)), side("sweep", len(sweep))
    wall = spread([p["wall_ratio"] for p in ok_pairs])
    b_one, b_many = s_one.get("bytes_per_step"), s_many.get("bytes_per_step")
    summary = {
        "pairs": len(ok_pairs),
        "wall_ratio": wall,
        "train_ratio": spread([p.get("train_ratio") for p in ok_pairs]),
        "cpu_ratio": spread([p.get("cpu_ratio") for p in ok_pairs]),
        "added_head_share": spread([p.get("added_head_share") for p in ok_pairs]),
        "pairs_sweep_slower": sum(1 for p in ok_pairs if p["wall_ratio"] > 1.0),
        "single": s_one, "sweep": s_many,
        "bytes_per_step_ratio": b_many / b_one if b_one and b_many else None,
        "bytes_per_step_per_added_head": ((b_many - b_one) / (len(sweep) - len(single))
                                          if b_one and b_many and len(sweep) > len(single) else None),
        "target": {"wall_ratio_at_most": TARGET_WALL_RATIO,
                   "met": wall["median"] <= TARGET_WALL_RATIO if wall else None},
        # The 1-minute load average around the counted runs (theirs included).
        "load_max": max([l[0] for r in counted for l in (r.get("load_before"), r.get("load_after")) if l]
                        or [None]) if counted else None,
    }
    failed = [r for r in counted if r["rc"] != 0]
    # The ratio is one of len(sweep) heads against len(single) only when the sweep trained them.
    untrained = len(sweep) > 1 and not any(r["label"] == "sweep" and r["rc"] == 0
                                           and r.get("heads_reported") == len(sweep) for r in counted)
    return {"runs": runs, "pairs": pairs, "summary": summary, "problems": problems,
            "failed": bool(failed) or untrained or not ok_pairs}


def cell(v, fmt="%.3f"):
    return "-" if v is None else (fmt % v if isinstance(v, float) else str(v))


def print_table(result, out=sys.stderr):
    cols = ["pair", "first", "single_wall_s", "sweep_wall_s", "wall_ratio", "train_ratio", "cpu_ratio",
            "added_head_share"]
    table = [cols] + [[cell(p.get(c)) for c in cols] for p in result["pairs"]]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)), file=out)
    s = result["summary"]

    def med(key):
        return cell((s.get(key) or {}).get("median"))

    print("median: wall_ratio %s (target <= %.2f: %s), train_ratio %s, cpu_ratio %s, added_head_share %s"
          % (med("wall_ratio"), TARGET_WALL_RATIO, s["target"]["met"], med("train_ratio"),
             med("cpu_ratio"), med("added_head_share")), file=out)
    print("bytes_per_step: %s head(s) %s, %s heads %s (ratio %s)"
          % (s["single"]["heads"], s["single"].get("bytes_per_step"), s["sweep"]["heads"],
             s["sweep"].get("bytes_per_step"), cell(s.get("bytes_per_step_ratio"), "%.2f")), file=out)
    cores = len(os.sched_getaffinity(0))
    if s.get("load_max") is not None and s["load_max"] > cores + 1:
        print("note: load average up to %.1f on %d cores: other work shared the machine, the ratios "
              "measure it too" % (s["load_max"], cores), file=out)
    for p in result["problems"]:
        print("problem: " + p, file=out)


def machine():
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), None)
    except OSError:
        pass
    return {"host": platform.node(), "cpu": model, "cores": len(os.sched_getaffinity(0))}


def report_command(a):
    sweep, single = parse_values(a.sweep), parse_values(a.single)
    facts = read_jsonl(a.facts)
    settings = dict(kv.split("=", 1) for kv in a.setting)
    result = summarise(facts, sweep, single, int(settings["classes"]) if "classes" in settings else None)
    report = {"schema": "pets_sweep_bench/1",
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "device": a.device, "machine": machine(), "settings": settings,
              "sweep_max_lr": sweep, "single_max_lr": single}
    report.update(result)
    os.makedirs(os.path.dirname(os.path.abspath(a.report)), exist_ok=True)
    tmp = a.report + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    os.replace(tmp, a.report)
    print_table(result)
    print("sweep_report: report " + a.report, file=sys.stderr)
    return 1 if result["failed"] else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb")
    t = sub.add_parser("time")
    t.add_argument("--facts", required=True)
    t.add_argument("--label", required=True, choices=("single", "sweep"))
    t.add_argument("--pair", type=int, required=True)
    t.add_argument("--max-lr", required=True)
    t.add_argument("--run", required=True)
    t.add_argument("--log", required=True)
    t.add_argument("--drop-models", action="store_true")
    t.add_argument("--deadline", type=float, default=0.0,
                   help="seconds since the epoch: skip the run (status 0) when a run as long as the "
                        "longest in --facts would end after it")
    t.add_argument("command", nargs=argparse.REMAINDER)
    r = sub.add_parser("report")
    r.add_argument("--facts", required=True)
    r.add_argument("--report", required=True)
    r.add_argument("--sweep", required=True)
    r.add_argument("--single", required=True)
    r.add_argument("--device", default="cpu")
    r.add_argument("--setting", action="append", default=[])
    a = ap.parse_args()
    if a.verb == "time":
        if a.command[:1] == ["--"]:
            a.command = a.command[1:]
        if not a.command:
            ap.error("time: no command after --")
        return time_command(a)
    if a.verb == "report":
        return report_command(a)
    ap.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
