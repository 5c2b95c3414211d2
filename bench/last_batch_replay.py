#!/usr/bin/env python3
"""What Accelerate's last batch does to a training run: replays a pets_train dump (PETS_DUMP_STEPS,
every step of the run) with PyTorch and timm twice, once as pets_train batched it (the epoch's last
global batch holds the images left, split evenly over the ranks) and once as Accelerate batches it
(that batch completed to ranks x batch with the epoch's first images, as its even_batches sharding
does), and prints both runs' training loss per step and per epoch. Everything else is the same:
the model, the inputs and crops (the completing images reuse their crops of the epoch's first
step), Adam, and OneCycleLR stepped as Accelerate steps it.

usage: bench/last_batch_replay.py DIR [--json FILE]
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from step_compare import accelerate_schedule, accelerate_steps, tutorial_model


def replay(run, initial, dumps, complete):
    ranks, batch, per_epoch = int(run["ranks"]), int(run["batch_size"]), int(run["steps_per_epoch"])
    model = tutorial_model(initial)
    optimizer = torch.optim.Adam(params=model.parameters(), lr=run["max_lr"] / 25)
    scheduler = accelerate_schedule(optimizer, run)
    losses = []
    for step, ranks_dumps in enumerate(dumps):
        shares = [(d["images"], d["labels"]) for d in ranks_dumps]
        if complete and (step + 1) % per_epoch == 0:
            images = torch.cat([s[0] for s in shares])
            labels = torch.cat([s[1] for s in shares])
            missing = ranks * batch - images.shape[0]
            first = dumps[step + 1 - per_epoch]
            images = torch.cat([images, torch.cat([d["images"] for d in first])[:missing]])
            labels = torch.cat([labels, torch.cat([d["labels"] for d in first])[:missing]])
            shares = [(images[r * batch:(r + 1) * batch], labels[r * batch:(r + 1) * batch])
                      for r in range(ranks)]
        total, count = 0.0, 0
        grads = [torch.zeros_like(model.fc.weight), torch.zeros_like(model.fc.bias)]
        for images, labels in shares:
            if images.shape[0] == 0:
                continue
            model.fc.weight.grad = model.fc.bias.grad = None
            loss = F.cross_entropy(model(images), labels, reduction="sum")
            loss.backward()
            total += loss.item()
            count += images.shape[0]
            grads[0] += model.fc.weight.grad
            grads[1] += model.fc.bias.grad
        model.fc.weight.grad, model.fc.bias.grad = grads[0] / count, grads[1] / count
        optimizer.step()
        accelerate_steps(scheduler, ranks)
        optimizer.zero_grad()
        losses.append((total, count))
    return losses


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir")
    p.add_argument("--json", default="")
    a = p.parse_args()
    run = json.load(open(os.path.join(a.dir, "run.json")))
    initial = load_file(os.path.join(a.dir, "initial.safetensors"))
    dumps, step = [], 0
    while os.path.exists(os.path.join(a.dir, f"step-{step}-rank-0.safetensors")):
        dumps.append([load_file(os.path.join(a.dir, f"step-{step}-rank-{r}.safetensors"))
                      for r in range(int(run["ranks"]))])
        step += 1
    per_epoch = int(run["steps_per_epoch"])
    dumps = dumps[:len(dumps) // per_epoch * per_epoch]
    if not dumps:
        p.error(a.dir + ": not one whole epoch of steps")
    report = {"run": run}
    for name, complete in (("as_pets_train", False), ("as_accelerate", True)):
        losses = replay(run, initial, dumps, complete)
        epochs = [sum(t for t, _ in losses[e:e + per_epoch]) / sum(n for _, n in losses[e:e + per_epoch])
                  for e in range(0, len(losses), per_epoch)]
        report[name] = {"step_losses": [t / n for t, n in losses], "epoch_losses": epochs}
        print(f"{name}: per epoch " + ", ".join(f"{x:.2f}" for x in epochs) + "; per step " +
              " ".join(f"{t / n:.2f}" for t, n in losses))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
