#!/usr/bin/env python3
"""The steps and the table of bench/bn_eval_compare.sh: the same trained model evaluated with three
sets of BatchNorm running statistics, to settle which ones the evaluation should use at several
ranks.

Under --bn-mode train every rank updates its own running statistics from its own batches, and
pets_train averages them over the ranks before each evaluation (src/train/step/batchnorm_sync.cpp);
the next epoch's steps start from that average. PyTorch DDP (broadcast_buffers=True) copies rank
0's buffers to every rank before each forward, its first evaluation forward included, so it
evaluates with rank 0's statistics, updated by rank 0's batches alone since the start. Train-mode
BatchNorm normalises with each batch's own statistics, so the running statistics never enter the
training: one run gives the head and every rank's batches, and the three evaluations differ only
in the statistics:

- `averaged`: the model pets_train wrote (model.safetensors), the ranks' average after the last step;
- `rank0_last_step`: rank 0's buffers after the last step, as pets_train's PETS_DUMP_STEPS dump
  holds them (the last epoch's updates are rank 0's alone, the earlier ones averaged);
- `rank0_ddp`: what DDP's rank 0 holds, its running statistics never averaged. The BatchNorm
  update r' = (1 - m) r + m b (m = 0.1; b the batch's mean or unbiased variance, which does not
  depend on r) is linear, so rank 0's own chain differs from its dumped buffers after the last
  step only by what each averaging replaced: sum over the epochs k before the last of
  (1 - m)^(T - t_k) (r0[t_k] - average[t_k]), t_k the epoch's last step, T the run's.

Subcommands (the driver runs them in this order):
  steps STORE --ranks R --batch-size B --epochs E   prints the run's training steps
  classes STORE                                    prints the store's number of classes
  eval-files STORE IMAGES                          prints the evaluation split's image paths
  models RUN                                       checks the dump, writes RUN/bn/*.safetensors
  replay RUN                                       checks rank0_ddp against timm (the first seed)
  score RUN --eval-files FILE --fresh DIR          scores RUN/bn/predict-*.txt into RUN/bn/scores.json
  summary [--json FILE] SEED=RUN ...               the Markdown table (stdout) and the sign tests

`models` checks first that the ranks' dumped buffers after the last step average to
model.safetensors's (float tolerance) and that rank 0's head after the last step is the model's:
the dump is of the run's last step. `replay` checks the closed form of rank0_ddp against DDP's
rank 0 run anew (timm's resnet50d in train mode over rank 0's dumped inputs, never averaged);
pets_train's own epoch-end averaging is what bench/step_compare.py replays. `score` checks that
the averaged model's accuracy on the evaluation split, as pets_predict computes it, is
pets_train's own final accuracy in RUN/pets/metrics.jsonl. A failed check exits 1.

usage: bench/bn_eval_compare.py SUBCOMMAND ... (--help on each)
"""
import argparse
import json
import math
import os
import sys

import numpy as np

from paired_summary import sign_test  # two-sided, of the seeds that are not ties

MOMENTUM = 0.1  # every BatchNorm's momentum (src/model/resnet50d.cpp), PyTorch's default
VARIANTS = ("averaged", "rank0_last_step", "rank0_ddp")
SETS = ("held_out", "fresh")
MEASURES = ("accuracy", "true_class_probability")  # the first decides; the second is finer
BUFFER_SUFFIXES = (".running_mean", ".running_var", ".num_batches_tracked")
# The ranks' average as pets_train computes it (float32 allreduce, then a division) against
# numpy's in float64: one or two float32 roundings of the buffer's scale.
AVERAGE_TOLERANCE = 1e-6
# timm's train-mode forward against pets_train's in float32, over a run's steps: step_compare.py
# measured the buffers within 3.8e-5 over 15 steps at -np 2 (bench/RESULTS.md).
REPLAY_TOLERANCE = 2e-4


def fail(message):
    print("bn_eval_compare.py: " + message, file=sys.stderr)
    sys.exit(1)


def label_of(name):
    """The class of an image file as pets_train derives it (src/data/labels.cpp): the name less
    `_<digits>.jpg`; None when it has no such ending."""
    if not name.endswith(".jpg"):
        return None
    stem = name[:-4]
    digits = len(stem)
    while digits > 0 and stem[digits - 1].isdigit():
        digits -= 1
    if digits == len(stem) or digits == 0 or stem[digits - 1] != "_":
        return None
    return stem[:digits - 1]


def store_split(store, split):
    import h5py

    with h5py.File(store, "r") as f:
        return [n.decode() if isinstance(n, bytes) else str(n) for n in f[split]["names"][()]]


def cmd_steps(a):
    train = len(store_split(a.store, "train"))
    per_step = a.batch_size * a.ranks
    print(a.epochs * ((train + per_step - 1) // per_step))


def cmd_classes(a):
    import h5py

    with h5py.File(a.store, "r") as f:
        print(len(f.attrs["label_names"]))


def cmd_eval_files(a):
    for name in store_split(a.store, "eval"):
        print(os.path.join(a.images, name))


def read_safetensors(path, keys=None):
    """The tensors named `keys` (all when None) and the metadata of a safetensors file."""
    from safetensors import safe_open

    with safe_open(path, framework="numpy") as f:
        missing = sorted(set(keys or []) - set(f.keys()))
        if missing:
            fail(f"{path}: no {missing[0]} (and {len(missing) - 1} more of the tensors asked for)")
        return {k: f.get_tensor(k) for k in (f.keys() if keys is None else keys)}, f.metadata() or {}


def is_buffer(name):
    return name.endswith(BUFFER_SUFFIXES)


def relative_difference(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(np.abs(b).max(), np.finfo(np.float32).tiny)
    return float(np.abs(a - b).max() / scale)


def cmd_models(a):
    from safetensors.numpy import save_file

    dump = os.path.join(a.run, "dump")
    with open(os.path.join(dump, "run.json")) as f:
        shape = json.load(f)
    ranks, epochs, per_epoch = int(shape["ranks"]), int(shape["epochs"]), int(shape["steps_per_epoch"])
    if ranks < 2:
        fail(f"{a.run}: a run of {ranks} rank; the statistics differ only at several")
    last = epochs * per_epoch - 1
    model_path = os.path.join(a.run, "pets", "model.safetensors")
    model, metadata = read_safetensors(model_path)
    buffers = [k for k in model if is_buffer(k)]
    if not buffers:
        fail(f"{model_path}: no BatchNorm buffers")
    for r in range(ranks):
        if not os.path.exists(os.path.join(dump, f"step-{last}-rank-{r}.safetensors")):
            fail(f"{dump}: no step {last} (the run's last, {epochs} epochs of {per_epoch} steps) "
                 f"of rank {r}: PETS_DUMP_STEPS must cover the whole run")
    if os.path.exists(os.path.join(dump, f"step-{last + 1}-rank-0.safetensors")):
        fail(f"{dump}: a step {last + 1}, past the run's last ({epochs} epochs of {per_epoch} steps)")

    def buffers_at(step, rank):
        return read_safetensors(os.path.join(dump, f"step-{step}-rank-{rank}.safetensors"), buffers)[0]

    ends = [(e + 1) * per_epoch - 1 for e in range(epochs)]
    at = {(t, r): buffers_at(t, r) for t in ends for r in range(ranks)}
    average = {t: {k: np.mean([at[t, r][k].astype(np.float64) for r in range(ranks)], axis=0)
                   for k in buffers} for t in ends}
    # The dump is of the run's last step: its average is the model's statistics, and its head the model's.
    worst, worst_name = 0.0, ""
    for k in buffers:
        if np.issubdtype(model[k].dtype, np.integer):
            for r in range(ranks):
                if not np.array_equal(at[last, r][k], model[k]):
                    fail(f"{k}: rank {r}'s {at[last, r][k]} after step {last}, the model's {model[k]}")
            continue
        d = relative_difference(average[last][k], model[k])
        if d > worst:
            worst, worst_name = d, k
    if worst > AVERAGE_TOLERANCE:
        fail(f"{worst_name}: the ranks' average after step {last} differs from {model_path}'s by "
             f"{worst:.1e} of its largest value (tolerance {AVERAGE_TOLERANCE:g}): the dump is not "
             "of the statistics the model was written with")
    # Only the buffers differ between the ranks: every rank's head after the last step is the
    # model's, and the frozen backbone is the initial model's.
    for r in range(ranks):
        head, _ = read_safetensors(os.path.join(dump, f"step-{last}-rank-{r}.safetensors"),
                                   ["fc.weight.after", "fc.bias.after"])
        for k in ("fc.weight", "fc.bias"):
            if not np.array_equal(head[k + ".after"], model[k]):
                fail(f"{k}: rank {r}'s after step {last} is not {model_path}'s")
    frozen = [k for k in model if not is_buffer(k) and not k.startswith("fc.")]
    initial, _ = read_safetensors(os.path.join(dump, "initial.safetensors"), frozen)
    for k in frozen:
        if not np.array_equal(initial[k], model[k]):
            fail(f"{k}: {model_path}'s is not the initial model's (a trained backbone?)")
    spread = max(relative_difference(at[last, r][k], at[last, 0][k])
                 for r in range(1, ranks) for k in buffers if not k.endswith(".num_batches_tracked"))

    keep = 1.0 - MOMENTUM
    own = {}
    for k in buffers:
        if k.endswith(".num_batches_tracked"):
            own[k] = at[last, 0][k]
            continue
        chain = at[last, 0][k].astype(np.float64)
        for t in ends[:-1]:
            chain = chain + keep ** (last - t) * (at[t, 0][k].astype(np.float64) - average[t][k])
        if k.endswith(".running_var") and not (chain > 0).all():
            fail(f"{k}: rank 0's own chain has a variance <= 0 ({chain.min():g})")
        own[k] = chain.astype(model[k].dtype)
    variants = {"rank0_last_step": {k: at[last, 0][k] for k in buffers}, "rank0_ddp": own}
    out = os.path.join(a.run, "bn")
    os.makedirs(out, exist_ok=True)
    notes = {"rank0_last_step": f"rank 0's running statistics after step {last}, the last",
             "rank0_ddp": "rank 0's running statistics never averaged over the ranks (DDP's)"}
    for name, values in variants.items():
        tensors = {k: (values[k] if k in values else v) for k, v in model.items()}
        save_file(tensors, os.path.join(out, name + ".safetensors"),
                  metadata={**metadata, "batchnorm_statistics": notes[name]})
    # What the variants were made from, small enough to keep once the dump is gone.
    save_file({f"step{t}.rank{r}.{k}": np.ascontiguousarray(at[t, r][k]) for t in ends
               for r in range(ranks) for k in buffers}, os.path.join(out, "epoch_end_buffers.safetensors"))
    facts = {"ranks": ranks, "epochs": epochs, "steps_per_epoch": per_epoch, "last_step": last,
             "average_vs_model": worst, "rank_spread_last_step": spread,
             "rank0_ddp_vs_last_step": max(relative_difference(own[k], at[last, 0][k]) for k in buffers),
             "rank0_ddp_vs_averaged": max(relative_difference(own[k], model[k]) for k in buffers)}
    with open(os.path.join(out, "models.json"), "w") as f:
        json.dump(facts, f, indent=1)
    print(f"{a.run}: the ranks' average after step {last} is the model's (largest difference "
          f"{worst:.1e} of a buffer's largest value); the ranks' buffers differ by up to {spread:.2f}, "
          f"rank 0's own chain from its last-step buffers by up to {facts['rank0_ddp_vs_last_step']:.2f}",
          file=sys.stderr)


def cmd_replay(a):
    """DDP's rank 0 replayed: timm's resnet50d from the dumped initial model, in train mode, over
    rank 0's dumped inputs of every step, its statistics never averaged; its buffers at the end
    must be RUN/bn/rank0_ddp.safetensors's (the closed form of `models`)."""
    import timm
    import torch
    from safetensors.torch import load_file

    torch.set_num_threads(a.threads)
    dump = os.path.join(a.run, "dump")
    with open(os.path.join(dump, "run.json")) as f:
        shape = json.load(f)
    steps = int(shape["epochs"]) * int(shape["steps_per_epoch"])
    initial = load_file(os.path.join(dump, "initial.safetensors"))
    model = timm.create_model("resnet50d", pretrained=False, num_classes=initial["fc.weight"].shape[0])
    model.load_state_dict(initial, strict=True)
    model.train()
    with torch.no_grad():
        for t in range(steps):
            model(load_file(os.path.join(dump, f"step-{t}-rank-0.safetensors"))["images"])
    closed = load_file(os.path.join(a.run, "bn", "rank0_ddp.safetensors"))
    last = load_file(os.path.join(dump, f"step-{steps - 1}-rank-0.safetensors"))
    floats = [(n, b.numpy()) for n, b in model.named_buffers() if b.is_floating_point()]
    worst = max(relative_difference(closed[n].numpy(), b) for n, b in floats)
    apart = max(relative_difference(last[n].numpy(), b) for n, b in floats)
    if worst > REPLAY_TOLERANCE:
        fail(f"{a.run}: rank0_ddp's buffers differ from timm's replay of DDP's rank 0 by {worst:.1e} "
             f"of a buffer's largest value (tolerance {REPLAY_TOLERANCE:g})")
    print(f"{a.run}: rank0_ddp's buffers are timm's replay of DDP's rank 0 over {steps} steps within "
          f"{worst:.1e} (rank 0's last-step buffers: {apart:.2f} from it)", file=sys.stderr)


def read_predictions(path):
    """pets_predict's lines `FILE  CLASS  PROBABILITY ...` (--top-k: pairs, most probable first):
    {FILE: {CLASS: PROBABILITY}} in that order."""
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                fields = line.rstrip("\n").split("  ")
                out[fields[0]] = {c: float(q) for c, q in zip(fields[1::2], fields[2::2])}
    return out


def binomial_upper_tail(k, n, p):
    """P(X >= k) for X ~ Binomial(n, p)."""
    return min(1.0, sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def cmd_score(a):
    with open(a.eval_files) as f:
        held_out = [line.rstrip("\n") for line in f if line.strip()]
    fresh = sorted(os.path.join(a.fresh, n) for n in os.listdir(a.fresh) if n.endswith(".jpg"))
    _, metadata = read_safetensors(os.path.join(a.run, "pets", "model.safetensors"), [])
    classes = json.loads(metadata["label_names"])
    fresh_classes = sorted({label_of(os.path.basename(p)) for p in fresh})
    if fresh_classes != sorted(classes):
        fail(f"{a.fresh}: its classes are not the model's ({len(fresh_classes)} against {len(classes)})")
    files = {"held_out": held_out, "fresh": fresh}
    scores = {}
    for v in VARIANTS:
        path = os.path.join(a.run, "bn", f"predict-{v}.txt")
        predicted = read_predictions(path)
        scores[v] = {}
        for s in SETS:
            missing = [p for p in files[s] if p not in predicted]
            if missing:
                fail(f"{path}: no prediction for {missing[0]} (and {len(missing) - 1} more)")
            truth = [label_of(os.path.basename(p)) for p in files[s]]
            correct = sum(1 for p, t in zip(files[s], truth) if next(iter(predicted[p])) == t)
            # Finer than the accuracy, and seldom tied: the probability given to the true class
            # (pets_predict prints 4 decimals; --top-k as many as there are classes).
            probability = sum(predicted[p].get(t, 0.0) for p, t in zip(files[s], truth)) / len(truth)
            scores[v][s] = {"correct": correct, "evaluated": len(files[s]),
                            "accuracy": 100.0 * correct / len(files[s]),
                            "true_class_probability": probability}
    with open(os.path.join(a.run, "pets", "metrics.jsonl")) as f:
        final = [json.loads(line) for line in f if line.strip()][-1]
    ours = scores["averaged"]["held_out"]
    if (ours["correct"], ours["evaluated"]) != (final["correct"], final["evaluated"]):
        fail(f"{a.run}: pets_predict's averaged model gets {ours['correct']} of {ours['evaluated']} "
             f"held-out images right, pets_train's last evaluation {final['correct']} of "
             f"{final['evaluated']} (metrics.jsonl): the harness does not evaluate what pets_train did")
    fresh_ours = scores["averaged"]["fresh"]
    scores["chance"] = 100.0 / len(classes)
    scores["fresh_above_chance_p"] = binomial_upper_tail(fresh_ours["correct"], fresh_ours["evaluated"],
                                                         1.0 / len(classes))
    with open(os.path.join(a.run, "bn", "models.json")) as f:
        scores["models"] = json.load(f)
    with open(os.path.join(a.run, "bn", "scores.json"), "w") as f:
        json.dump(scores, f, indent=1)
    print(f"{a.run}: held-out " + ", ".join(f"{v} {scores[v]['held_out']['accuracy']:.1f}" for v in VARIANTS)
          + " (pets_train's own: " + f"{final['accuracy']:.1f}); fresh "
          + ", ".join(f"{v} {scores[v]['fresh']['accuracy']:.1f}" for v in VARIANTS)
          + f" (chance {scores['chance']:.1f})", file=sys.stderr)


def compare(seeds, variant, s, measure):
    d = [x[variant][s][measure] - x["averaged"][s][measure] for x in seeds]
    wins, losses = sum(1 for x in d if x > 0), sum(1 for x in d if x < 0)
    mean = sum(d) / len(d)
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) > 1 else float("nan")
    return {"variant": variant, "set": s, "measure": measure, "rank0_higher": wins, "rank0_lower": losses,
            "ties": len(d) - wins - losses, "sign_test_p": sign_test(wins, wins + losses),
            "mean_difference": mean, "standard_error": se}


def cmd_summary(a):
    seeds = []
    for item in a.runs:
        seed, run = item.split("=", 1)
        with open(os.path.join(run, "bn", "scores.json")) as f:
            seeds.append({"seed": int(seed), **json.load(f)})
    first = seeds[0]
    print(f"BatchNorm statistics at evaluation, {len(seeds)} seeds, {first['models']['ranks']} ranks: "
          f"accuracy (%) on the held-out split ({first['averaged']['held_out']['evaluated']} images) "
          f"and on a fresh set ({first['averaged']['fresh']['evaluated']} images; chance "
          f"{first['chance']:.1f})\n")
    print("| seed | held-out: averaged | rank 0, last step | rank 0, DDP | fresh: averaged "
          "| rank 0, last step | rank 0, DDP |")
    print("|---|---|---|---|---|---|---|")
    for x in seeds:
        cells = [f"{x[v][s]['accuracy']:.1f}" for s in SETS for v in VARIANTS]
        print(f"| {x['seed']} | " + " | ".join(cells) + " |")
    comparisons = [compare(seeds, v, s, m) for m in MEASURES for v in VARIANTS[1:] for s in SETS]
    print("\nrank 0's statistics against the averaged ones (accuracy in points, true-class "
          "probability in percent points): the seeds where rank 0's are higher, lower, equal\n")
    print("| measure | rank 0's statistics | set | higher | lower | ties | sign test p "
          "| mean difference ± s.e. |")
    print("|---|---|---|---|---|---|---|---|")
    for c in comparisons:
        scale = 100.0 if c["measure"] == "true_class_probability" else 1.0
        print(f"| {c['measure']} | {c['variant']} | {c['set']} | {c['rank0_higher']} | {c['rank0_lower']} "
              f"| {c['ties']} | {c['sign_test_p']:.3f} | {scale * c['mean_difference']:+.2f} ± "
              f"{scale * c['standard_error']:.2f} |")
    below = [x["seed"] for x in seeds if x["fresh_above_chance_p"] >= 0.05]
    print(f"\nthe averaged model above chance on the fresh set (one-sided binomial p < 0.05) in "
          f"{len(seeds) - len(below)} of {len(seeds)} seeds" + (f"; not: seeds {below}" if below else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"seeds": seeds, "comparisons": comparisons}, f, indent=1)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("steps", help="the run's number of training steps")
    s.add_argument("store")
    s.add_argument("--ranks", type=int, required=True)
    s.add_argument("--batch-size", type=int, required=True)
    s.add_argument("--epochs", type=int, required=True)
    s.set_defaults(func=cmd_steps)
    s = sub.add_parser("classes", help="the store's number of classes")
    s.add_argument("store")
    s.set_defaults(func=cmd_classes)
    s = sub.add_parser("eval-files", help="the evaluation split's image paths")
    s.add_argument("store")
    s.add_argument("images")
    s.set_defaults(func=cmd_eval_files)
    s = sub.add_parser("models", help="check RUN/dump, write RUN/bn/rank0_*.safetensors")
    s.add_argument("run")
    s.set_defaults(func=cmd_models)
    s = sub.add_parser("replay", help="check RUN/bn/rank0_ddp.safetensors against timm's replay")
    s.add_argument("run")
    s.add_argument("--threads", type=int, default=1)
    s.set_defaults(func=cmd_replay)
    s = sub.add_parser("score", help="score RUN/bn/predict-*.txt")
    s.add_argument("run")
    s.add_argument("--eval-files", required=True)
    s.add_argument("--fresh", required=True)
    s.set_defaults(func=cmd_score)
    s = sub.add_parser("summary", help="the table and the sign tests")
    s.add_argument("--json", default="")
    s.add_argument("runs", nargs="+")
    s.set_defaults(func=cmd_summary)
    a = p.parse_args()
    return a.func(a) or 0


if __name__ == "__main__":
    sys.exit(main())
