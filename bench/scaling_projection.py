#!/usr/bin/env python3
"""What a training step's communication costs at 8, 64 and 256 GPUs, before and after the step
stopped carrying every rank's BatchNorm statistics: a ring allreduce of the bytes each rank hands
to the step (bytes_per_step), on NVLink, InfiniBand (400 Gb/s) and 25 GbE, against the step time
of a GPU measurement, as a share of each step. Also an evaluation's and a stop's traffic.

The model of a ring allreduce of S bytes over N ranks on links of bandwidth B and per-message
latency a: t = 2 (N - 1) / N * S / B + 2 (N - 1) * a (NCCL switches to trees for small messages
at scale, which shortens the latency term: the figures are an upper bound there).

usage: scaling_projection.py [--bytes-per-step B] [--step-ms MS] [--json OUT]
  --bytes-per-step: measured (metrics.jsonl's bytes_per_step; default: the 37-class head's 606,528)
  --step-ms: the step time to compare with (default 17.5: 7,300 img/s per GPU at batch 128)
"""
import argparse
import json
import sys

# ResNet-50d's BatchNorm buffers: running means and variances (float32) and 55 counters.
BN_FLOATS = 53_248
BN_COUNTERS = 55
HEAD = 2048 * 37 + 37  # fc.weight and fc.bias for 37 breeds

LINKS = {  # name: (bytes per second one way, latency per message in seconds)
    "NVLink (H100, 450 GB/s)": (450e9, 2e-6),
    "InfiniBand (400 Gb/s)": (50e9, 3e-6),
    "25 GbE": (25e9 / 8, 20e-6),
}


def ring_seconds(nbytes, ranks, link):
    bandwidth, latency = link
    if ranks == 1:
        return 0.0
    return 2 * (ranks - 1) / ranks * nbytes / bandwidth + 2 * (ranks - 1) * latency


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bytes-per-step", type=int, default=(HEAD + 3) * 8)
    p.add_argument("--step-ms", type=float, default=128 / 7300 * 1e3)
    p.add_argument("--json")
    a = p.parse_args(argv)
    rows = []
    print(f"step {a.step_ms:.1f} ms; bytes per step per rank: after {a.bytes_per_step:,}")
    print(f"{'GPUs':>5} {'link':<26} {'before MB':>10} {'before ms':>10} {'share':>7} "
          f"{'after MB':>9} {'after ms':>9} {'share':>7}")
    for ranks in (8, 64, 256):
        # Before: the head, 3 numbers and one row of BatchNorm state (float64) per rank.
        before = (HEAD + 3 + ranks * (BN_FLOATS + BN_COUNTERS)) * 8
        for name, link in LINKS.items():
            tb = ring_seconds(before, ranks, link) * 1e3
            ta = ring_seconds(a.bytes_per_step, ranks, link) * 1e3
            row = {"ranks": ranks, "link": name, "before_bytes": before, "before_ms": tb,
                   "before_share": tb / (tb + a.step_ms), "after_bytes": a.bytes_per_step,
                   "after_ms": ta, "after_share": ta / (ta + a.step_ms)}
            rows.append(row)
            print(f"{ranks:>5} {name:<26} {before / 1e6:>10.2f} {tb:>10.2f} {row['before_share']:>7.1%} "
                  f"{a.bytes_per_step / 1e6:>9.3f} {ta:>9.3f} {row['after_share']:>7.1%}")
    # An evaluation (--bn-mode train): the average of the statistics (float32) and rank 0's
    # counters; per batch one int64 (the stop agreement), at the end two (the accuracy).
    evaluation = {"batchnorm_average_bytes": BN_FLOATS * 4, "counters_broadcast_bytes": BN_COUNTERS * 8,
                  "per_batch_bytes": 8, "accuracy_bytes": 16}
    for ranks in (8, 64, 256):
        for name, link in LINKS.items():
            evaluation[f"{ranks} {name} ms"] = ring_seconds(BN_FLOATS * 4, ranks, link) * 1e3
    # A stop: before, rank 0 wrote every rank's statistics (float64 rows) in its checkpoint;
    # now each rank writes its own (float32 and int64, as the model holds them).
    stop = {str(r): {"before_rank0_extra_bytes": r * (BN_FLOATS + BN_COUNTERS) * 8,
                     "after_shard_bytes_per_rank": BN_FLOATS * 4 + BN_COUNTERS * 8} for r in (8, 64, 256)}
    print("evaluation (per epoch):", json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                                  for k, v in evaluation.items()}))
    print("stop (checkpoint bytes):", json.dumps(stop))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"step_ms": a.step_ms, "steps": rows, "evaluation": evaluation, "stop": stop}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
