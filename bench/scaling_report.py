#!/usr/bin/env python3
"""The report of bench/scaling_bench.sh: per rank count, the step's figures from the uninterrupted
run's folder and the checkpoint's files from the stopped run's folder; the JSON report to
--report, the table to stderr.

Per rank count: step_ms = the epoch's training seconds (metrics.jsonl's train_seconds, rank 0's)
over its steps (the global step of the epoch's checkpoint, which `latest` names); comm_share and
bytes_per_step as metrics.jsonl gives them (null where it has no such field); ckpt_bytes_rank0 =
the size of the stop's ckpt-<S>.safetensors, ckpt_bytes_per_other_rank = the mean size of its
shards ckpt-<S>.epoch-<E>.step-<P>.rank-<R>.safetensors that it records (null when none).
"""
import argparse
import json
import os
import re
import struct
import sys


def latest_checkpoint(run):
    """The checkpoint `latest` names in RUN and its global step, or (None, None)."""
    try:
        name = open(os.path.join(run, "latest")).read().split()[0]
    except (OSError, IndexError):
        return None, None
    m = re.fullmatch(r"ckpt-(\d+)\.safetensors", name)
    return (name, int(m.group(1))) if m else (None, None)


def step_figures(run):
    rows = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()]
    row = rows[-1]
    _, steps = latest_checkpoint(run)
    fig = {"steps": steps, "train_seconds": row["train_seconds"],
           "step_ms": round(1000.0 * row["train_seconds"] / steps, 3) if steps else None}
    missing = []
    for key in ("comm_share", "bytes_per_step"):
        fig[key] = row.get(key)
        if key not in row:
            missing.append(key)
    if fig["step_ms"] is not None and fig["comm_share"] is not None:
        fig["comm_ms"] = round(fig["step_ms"] * fig["comm_share"], 3)
    return fig, missing


def checkpoint_files(stop_run, ranks):
    name, step = latest_checkpoint(stop_run)
    if name is None:
        return {"ckpt": None, "ckpt_bytes_rank0": None, "ckpt_bytes_per_other_rank": None,
                "shards": 0}
    # The shards rank 0's checkpoint records as its own (a stop's other ranks may also have
    # written the steps beside it): ckpt-<S>.epoch-<E>.step-<P>.rank-<R>.safetensors.
    with open(os.path.join(stop_run, name), "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        state = json.loads(json.loads(f.read(size))["__metadata__"]["pets_state"])
    record = state.get("shards") or {"epoch": -1, "step": -1}
    shard = re.compile(rf"ckpt-{step}\.epoch-{record['epoch']}\.step-{record['step']}\.rank-(\d+)"
                       r"\.safetensors")
    sizes = {int(shard.fullmatch(f)[1]): os.path.getsize(os.path.join(stop_run, f))
             for f in os.listdir(stop_run) if shard.fullmatch(f)}
    return {"ckpt": name, "ckpt_bytes_rank0": os.path.getsize(os.path.join(stop_run, name)),
            "ckpt_bytes_per_other_rank": round(sum(sizes.values()) / len(sizes)) if sizes else None,
            "ckpt_bytes_other_ranks_max": max(sizes.values()) if sizes else None,
            "shards": len(sizes), "shards_expected": ranks - 1}


def cell(v, unit=""):
    if v is None:
        return "missing"
    if isinstance(v, float):
        return f"{v:.3g}{unit}" if abs(v) < 1 else f"{v:.1f}{unit}"
    return f"{v}{unit}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts", required=True, help="scaling_bench.sh's facts.jsonl")
    ap.add_argument("--link", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--image-size", type=int, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--cores", type=int, required=True)
    a = ap.parse_args()

    runs, missing = [], set()
    for line in open(a.facts):
        f = json.loads(line)
        r = {"ranks": f["ranks"], "hosts": f["hosts"],
             "ranks_per_host": -(-f["ranks"] // f["hosts"]), "link": a.link}
        if "error" in f:
            r["error"] = f["error"]
            runs.append(r)
            continue
        fig, miss = step_figures(f["run"])
        missing.update(miss)
        r.update(fig)
        r.update(checkpoint_files(f["stop_run"], f["ranks"]))
        stop = re.search(r"at (epoch \d+, step \d+)", f["stop_line"])
        r.update({"stop_at": stop.group(1) if stop else None, "job_wall_s": f["wall_s"],
                  "link_bytes": f["link_bytes"]})
        runs.append(r)

    report = {"schema": "pets_scaling/1", "link": a.link, "hosts": 4, "cores": a.cores,
              "image_size": a.image_size, "batch_size": a.batch_size,
              "missing_fields": sorted(missing), "runs": runs}
    with open(a.report, "w") as out:
        json.dump(report, out, indent=1)
        out.write("\n")

    cols = ["ranks", "hosts", "step_ms", "comm_ms", "comm_share", "bytes_per_step", "ckpt_bytes_rank0",
            "ckpt_bytes_per_other_rank", "link"]
    table = [cols] + [[r.get("error", "") if c == "step_ms" and "error" in r else cell(r.get(c))
                       for c in cols] for r in runs]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)), file=sys.stderr)
    if missing:
        print(f"missing in metrics.jsonl: {', '.join(sorted(missing))}", file=sys.stderr)
    if any(r.get("ckpt") and r.get("shards") != r.get("shards_expected") for r in runs):
        print("a stop's checkpoint lacks shards of some ranks (shards vs shards_expected)",
              file=sys.stderr)
    return 1 if any("error" in r for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
