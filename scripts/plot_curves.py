#!/usr/bin/env python3
"""Draws a run's training loss and held-out accuracy per epoch from its metrics.jsonl.

    scripts/plot_curves.py RUN_DIR_OR_METRICS_JSONL [--out PNG] [--title TEXT]

Two panels, 800 x 320 pixels: the mean training loss and the held-out accuracy (percent) of each
epoch; with a sweep (--max-lr A,B,C), one line per head, labelled by its max-lr. The default
--out is training_curves.png beside metrics.jsonl. docs/training_curves.png is drawn by it.
Bad input (no file, no epoch, a line that is not JSON) is one `error:` line and exit status 2.
"""
import argparse
import json
import os
import sys


def read_rows(path):
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    try:
        with open(path) as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}")
    rows = []
    for n, line in lines:
        try:
            row = json.loads(line)
            rows.append((int(row["epoch"]), row))
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path}:{n}: not an epoch's line of metrics.jsonl")
    if not rows:
        raise ValueError(f"{path}: no epoch")
    return path, [row for _, row in sorted(rows, key=lambda r: r[0])]


def series(rows):
    """(label, losses, accuracies) per line to draw: every head of a sweep, else the run."""
    if all("heads" in r for r in rows):
        count = min(len(r["heads"]) for r in rows)
        return [(f"max-lr {rows[0]['heads'][k]['max_lr']:g}",
                 [r["heads"][k]["train_loss"] for r in rows],
                 [r["heads"][k]["accuracy"] for r in rows]) for k in range(count)]
    return [(None, [r["train_loss"] for r in rows], [r["accuracy"] for r in rows])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="a run folder (--out of pets_train) or its metrics.jsonl")
    parser.add_argument("--out", help="the PNG to write (default: training_curves.png beside it)")
    parser.add_argument("--title", help="a title above both panels")
    args = parser.parse_args()
    try:
        path, rows = read_rows(args.metrics)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        import matplotlib
    except ImportError:
        print("error: matplotlib is missing (scripts/install_deps.sh installs python3-matplotlib)",
              file=sys.stderr)
        return 2
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = args.out or os.path.join(os.path.dirname(os.path.abspath(path)), "training_curves.png")
    epochs = [r["epoch"] for r in rows]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    lines = series(rows)
    for label, losses, accuracies in lines:
        ax_loss.plot(epochs, losses, marker="o", label=label)
        ax_acc.plot(epochs, accuracies, marker="o", label=label,
                    color="tab:green" if len(lines) == 1 else None)
    ax_loss.set(xlabel="epoch", ylabel="mean training loss", title="training loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="held-out accuracy", ylim=(0, 100))
    for ax in (ax_loss, ax_acc):
        ax.set_xticks(epochs)
    if len(lines) > 1:
        ax_acc.legend(fontsize="small")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    print(f"wrote {out} ({len(rows)} epochs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
