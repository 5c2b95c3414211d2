"""Reads a `pets_train --tensorboard DIR --progress-interval 0` folder back with the tensorboard
package's EventAccumulator and checks it against the run's metrics.jsonl: the tags, a train/
point at every global step 1..N exactly once, eval/ points at each epoch's last step, and the
epoch's values (accuracy, train_loss, lr, images/s) equal to metrics.jsonl's as float32.

usage: check_tensorboard.py LOGDIR METRICS_JSONL STEPS_PER_EPOCH [SAME_AS_LOGDIR]
With SAME_AS_LOGDIR: the loss, lr and accuracy series must equal that folder's (a resumed run
against an uninterrupted one). Prints one line per problem, exits 1 when there is any.
"""
import json
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

TAGS = {"train/loss", "train/images_per_s", "train/lr", "eval/accuracy", "eval/images_per_s"}
problems = []


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def load(logdir):
    # 0: keep every point (the default samples 1,000 per tag).
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def main():
    logdir, metrics_path, steps_per_epoch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(metrics_path) as f:
        epochs = [json.loads(line) for line in f if line.strip()]
    series = load(logdir)
    if set(series) != TAGS:
        problems.append(f"tags {sorted(series)}, want {sorted(TAGS)}")
    last = steps_per_epoch * len(epochs)
    ends = [steps_per_epoch * (e["epoch"] + 1) for e in epochs]
    for tag in ("train/loss", "train/images_per_s", "train/lr"):
        steps = [s for s, _ in series.get(tag, [])]
        if steps != list(range(1, last + 1)):
            problems.append(f"{tag} at steps {steps}, want each of 1..{last} once")
    for tag in ("eval/accuracy", "eval/images_per_s"):
        steps = [s for s, _ in series.get(tag, [])]
        if steps != ends:
            problems.append(f"{tag} at steps {steps}, want {ends} (each epoch's last step)")
    for tag, key in [("eval/accuracy", "accuracy"), ("eval/images_per_s", "eval_images_per_s"),
                     ("train/loss", "train_loss"), ("train/lr", "lr"),
                     ("train/images_per_s", "train_images_per_s")]:
        at = dict(series.get(tag, []))
        for step, e in zip(ends, epochs):
            if at.get(step) != f32(e[key]):
                problems.append(f"{tag} at step {step}: {at.get(step)}, metrics.jsonl's {key} of "
                                f"epoch {e['epoch']} is {e[key]} ({f32(e[key])} as float32)")
    if len(sys.argv) > 4:
        other = load(sys.argv[4])
        for tag in ("train/loss", "train/lr", "eval/accuracy"):
            if series.get(tag) != other.get(tag):
                problems.append(f"{tag} differs from {sys.argv[4]}'s: {series.get(tag)} against "
                                f"{other.get(tag)}")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
