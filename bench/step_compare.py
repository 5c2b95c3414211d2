#!/usr/bin/env python3
"""Replays pets_train's first training steps with PyTorch and timm and names the first quantity
that differs: the proof, step by step, that pets_train's step is the tutorial's.

pets_train writes the steps with PETS_DUMP_STEPS="DIR:N" (include/pets/train/run/step_dump.hpp):
every rank's input tensors, labels, the head before and after, the averaged gradient, the loss,
the lr and beta1 and the BatchNorm buffers. This script builds timm's resnet50d with the dumped
initial model, in train mode with every parameter but `fc` frozen, and for each step and rank runs
the forward on the dumped inputs (the rank's own BatchNorm buffers, as pets_train keeps them), the
cross-entropy, the gradient averaged over the global batch (what DDP's average is when the ranks'
batches are equal), torch's Adam, and OneCycleLR built as the tutorial builds it (its length in
one process's batches) and stepped as Accelerate steps it (`num_processes` times per optimiser
step, while `_step_count <= total_steps`). The head runs free: the Python side never copies
pets_train's weights, so a difference shows where it first appears and is not hidden.

With --images DIR (the image folder the store was made from), each dumped input is also
compared with torchvision's RandomResizedCrop of the same box (F.resized_crop, bilinear, on
PIL's decode), in grey levels.

Prints one line per step and rank and a last line `first difference: ...` or `agree: ...`;
exits 1 when something differs beyond tolerance (--json writes the figures).

usage: bench/step_compare.py DIR [--images DIR] [--json FILE]
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

MEAN = torch.tensor([0.485, 0.456, 0.406])[None, :, None, None]
STD = torch.tensor([0.229, 0.224, 0.225])[None, :, None, None]

# Float tolerances: pets_train and PyTorch run the same float32 operations in other orders (the
# backbone's features differ by 1e-6 to 1e-4 relative, more as the random backbone's layers
# amplify rounding; the loss as much once the head's logits are large). Norm-relative
# (relative()). The head and the BatchNorm buffers are compared after the step: Adam's first
# steps move each weight by about lr * sign(gradient), so the few weights whose gradient is at
# rounding level move either way (about 1e-3 of the head's norm after the first step, measured);
# a running variance of a channel whose batch variance is near zero carries its rounding likewise
# (2e-4).
TOLERANCE = {"lr": 1e-9, "beta1": 1e-9, "loss": 1e-4, "grad": 1e-3, "free_loss": 1e-3, "head": 5e-3,
             "buffers": 1e-3, "input_grey_levels": 1.001}


def load(path):
    from safetensors.torch import load_file
    return load_file(path)


def tutorial_model(initial):
    """timm's resnet50d holding `initial` (a pets_train state dict), every parameter frozen but
    fc's, in train mode: the tutorial's model."""
    import timm
    model = timm.create_model("resnet50d", pretrained=False, num_classes=initial["fc.weight"].shape[0])
    model.load_state_dict(initial, strict=True)
    for param in model.parameters():
        param.requires_grad = False
    for param in model.fc.parameters():
        param.requires_grad = True
    return model.train()


def accelerate_schedule(optimizer, run):
    """OneCycleLR as the tutorial builds it: its length in one process's batches."""
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer=optimizer, max_lr=run["max_lr"], epochs=int(run["epochs"]),
        steps_per_epoch=math.ceil(int(run["train_images"]) / int(run["batch_size"])))


def relative(a, b):
    """||a - b|| / ||b|| (1 where b is all zeros and a is not). A norm, not the largest element:
    Adam's first steps move each weight by about lr * sign(gradient), so the few weights whose
    gradient is at rounding level move either way on either side."""
    a, b = a.double(), b.double()
    scale = b.norm().item()
    diff = (a - b).norm().item()
    return diff / scale if scale > 0 else (0.0 if diff == 0 else 1.0)


def accelerate_steps(scheduler, processes):
    """AcceleratedScheduler.step() with split_batches=False: num_processes scheduler steps per
    optimiser step, none once _step_count exceeds total_steps."""
    for _ in range(processes):
        if scheduler._step_count <= scheduler.total_steps:
            scheduler.step()


def input_check(images, meta, folder, size):
    """The largest difference, in grey levels, between the dumped inputs and torchvision's
    RandomResizedCrop of the same boxes."""
    import PIL.Image
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF
    worst = 0.0
    for i, (name, (top, left, h, w)) in enumerate(zip(meta["names"], meta["boxes"])):
        with PIL.Image.open(os.path.join(folder, name)) as im:
            crop = TF.resized_crop(im.convert("RGB"), top, left, h, w, [size, size],
                                   InterpolationMode.BILINEAR)
        ref = TF.to_tensor(crop)
        ours = images[i:i + 1] * STD + MEAN
        worst = max(worst, (ours[0] - ref).abs().max().item() * 255.0)
    return worst


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir")
    p.add_argument("--images", default="")
    p.add_argument("--json", default="")
    a = p.parse_args()

    run = json.load(open(os.path.join(a.dir, "run.json")))
    ranks = int(run["ranks"])
    model = tutorial_model(load(os.path.join(a.dir, "initial.safetensors")))
    buffer_names = [n for n, _ in model.named_buffers()]
    rank_buffers = [{n: b.clone() for n, b in model.named_buffers()} for _ in range(ranks)]

    # The tutorial: Adam at max_lr/25, OneCycleLR over epochs x len(train_dataloader) of one process.
    optimizer = torch.optim.Adam(params=model.parameters(), lr=run["max_lr"] / 25)
    scheduler = accelerate_schedule(optimizer, run)
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    first, rows = None, []
    step = 0
    while os.path.exists(os.path.join(a.dir, f"step-{step}-rank-0.safetensors")):
        dumps = [load(os.path.join(a.dir, f"step-{step}-rank-{r}.safetensors")) for r in range(ranks)]
        row = {"step": step}
        loss_sum = 0.0
        grads = [torch.zeros_like(model.fc.weight, dtype=torch.float64),
                 torch.zeros_like(model.fc.bias, dtype=torch.float64)]
        row["head_before"] = max(relative(model.fc.weight, dumps[0]["fc.weight.before"]),
                                 relative(model.fc.bias, dumps[0]["fc.bias.before"]))
        buffers_diff = 0.0
        worst_input = 0.0
        forced_loss, forced = 0.0, [torch.zeros_like(grads[0]), torch.zeros_like(grads[1])]
        for r, d in enumerate(dumps):
            with torch.no_grad():
                for n, b in model.named_buffers():
                    b.copy_(rank_buffers[r][n])
            images, labels = d["images"], d["labels"]
            if images.shape[0] > 0:
                with torch.no_grad():
                    features = model.forward_head(model.forward_features(images), pre_logits=True)
                # Free running: the Python side's own head.
                loss = F.cross_entropy(model.fc(features), labels, reduction="sum")
                model.fc.weight.grad = model.fc.bias.grad = None
                loss.backward()
                loss_sum += loss.item()
                grads[0] += model.fc.weight.grad.double()
                grads[1] += model.fc.bias.grad.double()
                # Teacher forced: pets_train's head before this step, so that this step's loss and
                # gradient are compared free of the rounding the earlier steps accumulated.
                w = d["fc.weight.before"].clone().requires_grad_()
                bias = d["fc.bias.before"].clone().requires_grad_()
                loss = F.cross_entropy(F.linear(features, w, bias), labels, reduction="sum")
                loss.backward()
                forced_loss += loss.item()
                forced[0] += w.grad.double()
                forced[1] += bias.grad.double()
            rank_buffers[r] = {n: b.clone() for n, b in model.named_buffers()}
            buffers_diff = max(buffers_diff, max(relative(rank_buffers[r][n].double(), d[n].double())
                                                 for n in buffer_names))
            if a.images:
                meta = json.load(open(os.path.join(a.dir, f"step-{step}-rank-{r}.json")))
                worst_input = max(worst_input, input_check(images, meta, a.images, images.shape[-1]))
        if (step + 1) % int(run["steps_per_epoch"]) == 0 and ranks > 1:
            # pets_train averages the ranks' running statistics before each evaluation
            # (BatchNormSync::synchronise); the counters are the same on every rank.
            for n in buffer_names:
                if rank_buffers[0][n].is_floating_point():
                    mean = sum(rb[n].double() for rb in rank_buffers) / ranks
                    for rb in rank_buffers:
                        rb[n] = mean.to(rb[n].dtype)
        total = dumps[0]["images_total"].item()
        dumped_loss = dumps[0]["loss_sum"].item()
        row["loss"] = abs(forced_loss - dumped_loss) / abs(dumped_loss)
        row["grad"] = max(relative(forced[0] / total, dumps[0]["fc.weight.grad"]),
                          relative(forced[1] / total, dumps[0]["fc.bias.grad"]))
        row["free_loss"] = abs(loss_sum - dumped_loss) / abs(dumped_loss)
        row["loss_value"] = loss_sum / total
        model.fc.weight.grad = (grads[0] / total).float()
        model.fc.bias.grad = (grads[1] / total).float()
        group = optimizer.param_groups[0]
        row["lr_value"] = group["lr"]
        row["lr"] = abs(group["lr"] - dumps[0]["lr"].item()) / group["lr"]
        row["beta1"] = abs(group["betas"][0] - dumps[0]["beta1"].item()) / group["betas"][0]
        optimizer.step()
        accelerate_steps(scheduler, ranks)
        optimizer.zero_grad()
        row["head"] = max(relative(model.fc.weight, dumps[0]["fc.weight.after"]),
                          relative(model.fc.bias, dumps[0]["fc.bias.after"]))
        row["buffers"] = buffers_diff
        if a.images:
            row["input_grey_levels"] = worst_input
        rows.append(row)
        print(f"step {step}: loss {row['loss_value']:.5f} (rel diff {row['loss']:.1e}; free running "
              f"{row['free_loss']:.1e}), lr {row['lr_value']:.6g} (rel diff {row['lr']:.1e}), "
              f"grad {row['grad']:.1e}, head {row['head']:.1e}, BN buffers {row['buffers']:.1e}" +
              (f", inputs {worst_input:.2f} grey levels" if a.images else ""))
        for key in ("input_grey_levels", "lr", "beta1", "loss", "grad", "free_loss", "head", "buffers"):
            if first is None and key in row and not row[key] <= TOLERANCE[key]:
                first = (step, key, row[key])
        step += 1
    if step == 0:
        p.error(a.dir + ": no step-0-rank-0.safetensors")
    verdict = (f"first difference: step {first[0]}, {first[1]} {first[2]:.3g} (tolerance {TOLERANCE[first[1]]:g})"
               if first else f"agree: {step} steps at {ranks} ranks within tolerance")
    print(verdict)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"run": run, "steps": rows, "tolerance": TOLERANCE, "verdict": verdict}, f, indent=1)
    return 1 if first else 0


if __name__ == "__main__":
    sys.exit(main())
