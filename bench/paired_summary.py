#!/usr/bin/env python3
"""The table of bench/paired_compare.sh: for each seed, pets_train's and the tutorial loop's mean
training loss per epoch (over the images each epoch's steps trained) and final held-out accuracy;
then, per epoch, the mean difference (pets_train - tutorial), its standard error, how many seeds
have pets_train higher and the sign test's two-sided p-value. A difference in the training shows
as a sign held by (nearly) every seed (a small p); a chance one does not.

usage: bench/paired_summary.py --ranks N [--json FILE] SEED=RUN_DIR ...
"""
import argparse
import json
import math
import os
import sys


def pets_epochs(run):
    with open(os.path.join(run, "pets", "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [(r["train_loss"], r["accuracy"], r["lr"]) for r in rows]


def tutorial_epochs(run):
    with open(os.path.join(run, "tutorial.json")) as f:
        rows = json.load(f)["epochs"]
    return [(r["train_loss"], 100 * r["accuracy"], r["lr"]) for r in rows]


def sign_test(higher, n):
    """Two-sided p-value of `higher` of `n` seeds having pets_train higher when either side is
    as likely (the binomial sign test): small values are a consistent sign."""
    tail = min(higher, n - higher)
    p = 2 * sum(math.comb(n, k) for k in range(tail + 1)) / 2 ** n
    return min(1.0, p)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--json", default="")
    p.add_argument("runs", nargs="+")
    a = p.parse_args()
    seeds = []
    for item in a.runs:
        seed, run = item.split("=", 1)
        seeds.append({"seed": int(seed), "pets_train": pets_epochs(run), "tutorial": tutorial_epochs(run)})
    epochs = min(len(s["pets_train"]) for s in seeds)
    print(f"paired comparison, {a.ranks} rank(s), {len(seeds)} seeds: training loss per epoch "
          "(pets_train | tutorial), final accuracy")
    for s in seeds:
        ours = ", ".join(f"{e[0]:.2f}" for e in s["pets_train"])
        ref = ", ".join(f"{e[0]:.2f}" for e in s["tutorial"])
        print(f"  seed {s['seed']}: {ours} | {ref}; accuracy {s['pets_train'][-1][1]:.1f} | {s['tutorial'][-1][1]:.1f}")
    summary = []
    for e in range(epochs):
        d = [s["pets_train"][e][0] - s["tutorial"][e][0] for s in seeds]
        mean = sum(d) / len(d)
        se = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) > 1 else float("nan")
        higher = sum(1 for x in d if x > 0)
        lr = [s["pets_train"][e][2] / s["tutorial"][e][2] - 1 for s in seeds]
        summary.append({"epoch": e, "mean_loss_difference": mean, "standard_error": se,
                        "seeds_pets_train_higher": higher, "seeds": len(d),
                        "sign_test_p": sign_test(higher, len(d)),
                        "largest_lr_relative_difference": max(abs(x) for x in lr)})
        print(f"  epoch {e}: loss difference {mean:+.3f} ± {se:.3f} (pets_train higher in {higher} of {len(d)}, "
              f"sign test p = {sign_test(higher, len(d)):.2f}); "
              f"last-step lr differs by {max(abs(x) for x in lr):.1e} relative")
    acc = [s["pets_train"][-1][1] - s["tutorial"][-1][1] for s in seeds]
    print(f"  final accuracy difference {sum(acc) / len(acc):+.1f} points (pets_train higher in "
          f"{sum(1 for x in acc if x > 0)} of {len(acc)})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ranks": a.ranks, "seeds": seeds, "epochs": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
