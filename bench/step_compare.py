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

A run that trained the backbone too (run.json's `unfrozen_stages`, `backbone_lr_ratio` and
`unfreeze_epoch`, pets_train's --unfreeze options; absent in older dumps: the head alone) is
replayed with tutorial_run.py's groups: the trained stages' parameters first, fc's second, and
OneCycleLR over [ratio * max_lr, max_lr]. In a step where the backbone trains (from the unfreeze
epoch on), each rank's batch goes through the whole model twice, free running and teacher forced
(every trained parameter at the rank's dumped value before the step); compared are the loss, every
trained parameter's averaged gradient (on every rank's copy), the BatchNorm buffers, the backbone
group's lr, and the values after the step: torch's Adam applied to pets_train's own values and
gradients (its state kept from those since the first step, a parameter's from its first gradient)
must give the dumped values, and each step must start from the values the last one ended with.
The free-running head, loss and backbone are printed but not judged in those steps: a backbone
weight whose gradient is at rounding level moves by the lr either way, the features move with it,
and the trajectories part by more than rounding without either being wrong.

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

from tutorial_run import UNFREEZE, trained_backbone  # bench/, this script's folder

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
# With the backbone trained too. backbone_grad: each trained backbone parameter's averaged gradient,
# norm-relative, teacher forced. Float32 backward through up to 50 convolutions and 53 train-mode
# BatchNorms in another order of operations: a channel whose batch variance is small amplifies
# rounding by 1/sqrt(var + eps) on the way back, so a few tensors differ much more than the median
# (timm's resnet50d a few Adam steps from its initialisation, random 112-pixel batches of 8 and 16:
# float32 against float64 up to 3.6e-3, float32 at one thread against two up to 3.8e-3, the median
# 1e-6 to 3e-5); pets_train's average over the ranks in float32 adds 1e-7. 2e-2 is 5 times the
# worst seen. after: torch's Adam on pets_train's own values and gradient against pets_train's
# values after the step, rounding of the update alone (1e-7 of it). before: a step's values before
# are the last step's after, bit for bit.
UNFROZEN_TOLERANCE = {"lr_backbone": 1e-9, "backbone_grad": 2e-2, "after": 1e-5, "before": 0.0}
# The order in which a step's quantities are judged: the first beyond tolerance is the one named.
ORDER = ("input_grey_levels", "lr", "lr_backbone", "beta1", "before", "loss", "grad", "backbone_grad",
         "free_loss", "head", "after", "buffers")
# Free running, not judged in a step that trains the backbone (the module's docstring says why).
FREE_RUNNING = ("free_loss", "head")


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


def accelerate_schedule(optimizer, run, max_lr):
    """OneCycleLR as the tutorial builds it: its length in one process's batches."""
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer=optimizer, max_lr=max_lr, epochs=int(run["epochs"]),
        steps_per_epoch=math.ceil(int(run["train_images"]) / int(run["batch_size"])))


def tutorial_optimizer(groups, run, ratio):
    """Adam at max_lr/25 and its OneCycleLR as tutorial_run.py builds them. `groups`: [every
    parameter] with the backbone frozen (one group, the tutorial's); or [the trained backbone's,
    fc's], peaking at ratio * max_lr and max_lr."""
    if len(groups) == 1:
        optimizer = torch.optim.Adam(params=groups[0], lr=run["max_lr"] / 25)
        return optimizer, accelerate_schedule(optimizer, run, run["max_lr"])
    optimizer = torch.optim.Adam([{"params": group} for group in groups], lr=run["max_lr"] / 25)
    return optimizer, accelerate_schedule(optimizer, run, [ratio * run["max_lr"], run["max_lr"]])


class ForcedAdam:
    """torch's Adam and OneCycleLR, in the replay's groups, over copies of the trained parameters
    that take pets_train's values before each step and its averaged gradient: pets_train's
    optimiser step checked on its own inputs, free of the rounding the trajectories accumulate. A
    parameter without a gradient in a step (a stage before the unfreeze epoch) gets no Adam state,
    as in the run."""

    def __init__(self, backbone, head, run, ratio):
        self.values = {n: q.detach().clone() for n, q in backbone + head}
        self.optimizer, self.scheduler = tutorial_optimizer(
            [[self.values[n] for n, _ in backbone], [self.values[n] for n, _ in head]], run, ratio)

    def step(self, dump, names, processes):
        """One step from `dump`'s values before and gradients of `names`; their values after."""
        for n in names:
            self.values[n].copy_(dump[n + ".before"])
            self.values[n].grad = dump[n + ".grad"].clone()
        self.optimizer.step()
        accelerate_steps(self.scheduler, processes)
        for value in self.values.values():
            value.grad = None
        return {n: self.values[n] for n in names}


def relative(a, b):
    """||a - b|| / ||b|| (1 where b is all zeros and a is not). A norm, not the largest element:
    Adam's first steps move each weight by about lr * sign(gradient), so the few weights whose
    gradient is at rounding level move either way on either side."""
    a, b = a.double(), b.double()
    scale = b.norm().item()
    diff = (a - b).norm().item()
    return diff / scale if scale > 0 else (0.0 if diff == 0 else 1.0)


def worst(values, key=lambda v: v):
    """The largest of `values` by `key`, a NaN counting as the largest."""
    return max(values, key=lambda v: math.inf if math.isnan(key(v)) else key(v))


def accelerate_steps(scheduler, processes):
    """AcceleratedScheduler.step() with split_batches=False: num_processes scheduler steps per
    optimiser step, none once _step_count exceeds total_steps."""
    for _ in range(processes):
        if scheduler._step_count <= scheduler.total_steps:
            scheduler.step()


def head_pass(model, d, grads, forced):
    """The head's step on one rank's batch `d`, the backbone frozen: the features once, then the
    head free running and teacher forced. Adds the gradients of the summed loss to `grads` and
    `forced` (by name); returns both losses."""
    images, labels = d["images"], d["labels"]
    with torch.no_grad():
        features = model.forward_head(model.forward_features(images), pre_logits=True)
    # Free running: the Python side's own head.
    loss = F.cross_entropy(model.fc(features), labels, reduction="sum")
    model.fc.weight.grad = model.fc.bias.grad = None
    loss.backward()
    free_loss = loss.item()
    grads["fc.weight"] += model.fc.weight.grad.double()
    grads["fc.bias"] += model.fc.bias.grad.double()
    # Teacher forced: pets_train's head before this step, so that this step's loss and gradient
    # are compared free of the rounding the earlier steps accumulated.
    w = d["fc.weight.before"].clone().requires_grad_()
    bias = d["fc.bias.before"].clone().requires_grad_()
    loss = F.cross_entropy(F.linear(features, w, bias), labels, reduction="sum")
    loss.backward()
    forced["fc.weight"] += w.grad.double()
    forced["fc.bias"] += bias.grad.double()
    return free_loss, loss.item()


def model_pass(model, d, params, buffers, grads, forced):
    """The step of the trained parameters `params` (name, parameter) on one rank's batch `d`: the
    whole model free running (the replay's own values), then teacher forced (the rank's dumped
    values before the step), each from the rank's BatchNorm buffers `buffers`; the model keeps
    the teacher-forced pass's buffers (train-mode BatchNorm reads none: both passes normalise
    with the batch's statistics). Adds the gradients of the summed loss to `grads` and `forced`
    (by name); returns both losses."""
    own = {n: q.detach().clone() for n, q in params}
    losses = []
    for target, values in ((grads, None), (forced, d)):
        with torch.no_grad():
            for n, b in model.named_buffers():
                b.copy_(buffers[n])
            if values is not None:
                for n, q in params:
                    q.copy_(values[n + ".before"])
        for _, q in params:
            q.grad = None
        loss = F.cross_entropy(model(d["images"]), d["labels"], reduction="sum")
        loss.backward()
        losses.append(loss.item())
        for n, q in params:
            target[n] += q.grad.double()
    with torch.no_grad():
        for n, q in params:
            q.copy_(own[n])
            q.grad = None
    return losses


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
    # Dumps from before the backbone could train have none of these: the head alone.
    stages, ratio = int(run.get("unfrozen_stages", 0)), float(run.get("backbone_lr_ratio", 0.1))
    unfreeze_epoch = int(run.get("unfreeze_epoch", 0))
    initial = load(os.path.join(a.dir, "initial.safetensors"))
    model = tutorial_model(initial)
    backbone = trained_backbone(model.named_parameters(), stages)
    head = [("fc.weight", model.fc.weight), ("fc.bias", model.fc.bias)]
    buffer_names = [n for n, _ in model.named_buffers()]
    rank_buffers = [{n: b.clone() for n, b in model.named_buffers()} for _ in range(ranks)]

    # The tutorial: Adam at max_lr/25, OneCycleLR over epochs x len(train_dataloader) of one process.
    if stages:
        optimizer, scheduler = tutorial_optimizer([[q for _, q in backbone], [q for _, q in head]], run, ratio)
        forced_adam = ForcedAdam(backbone, head, run, ratio)
        tolerance = dict(TOLERANCE, **UNFROZEN_TOLERANCE)
        # Per rank, each trained parameter's value after the last step that trained it.
        previous = [{n: initial[n] for n, _ in backbone + head} for _ in range(ranks)]
    else:
        optimizer, scheduler = tutorial_optimizer([list(model.parameters())], run, ratio)
        tolerance = TOLERANCE
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    first, rows = None, []
    step = 0
    while os.path.exists(os.path.join(a.dir, f"step-{step}-rank-0.safetensors")):
        dumps = [load(os.path.join(a.dir, f"step-{step}-rank-{r}.safetensors")) for r in range(ranks)]
        # The stages train from the unfreeze epoch on; before it they take no gradient.
        trained = backbone if stages and step // int(run["steps_per_epoch"]) >= unfreeze_epoch else []
        for _, q in backbone:
            q.requires_grad = bool(trained)
        expected = sorted(n for n, _ in trained)
        for r, d in enumerate(dumps):
            found = sorted(k[:-len(".before")] for k in d if k.endswith(".before") and not k.startswith("fc."))
            if found != expected:
                some = lambda names: ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")  # noqa: E731
                missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
                print(f"first difference: step {step}, rank {r} trained {len(found)} backbone parameters, the "
                      f"replay {len(expected)}" + (f"; not in the dump: {some(missing)}" if missing else "") +
                      (f"; not trained by the replay: {some(extra)}" if extra else ""))
                return 1
        row = {"step": step}
        loss_sum = 0.0
        grads = {n: torch.zeros_like(q, dtype=torch.float64) for n, q in head + trained}
        row["head_before"] = max(relative(model.fc.weight, dumps[0]["fc.weight.before"]),
                                 relative(model.fc.bias, dumps[0]["fc.bias.before"]))
        buffers_diff = 0.0
        worst_input = 0.0
        forced_loss, forced = 0.0, {n: torch.zeros_like(g) for n, g in grads.items()}
        for r, d in enumerate(dumps):
            with torch.no_grad():
                for n, b in model.named_buffers():
                    b.copy_(rank_buffers[r][n])
            images = d["images"]
            if images.shape[0] > 0:
                free, teacher = (model_pass(model, d, trained + head, rank_buffers[r], grads, forced)
                                 if trained else head_pass(model, d, grads, forced))
                loss_sum += free
                forced_loss += teacher
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
        row["grad"] = max(relative(forced["fc.weight"] / total, dumps[0]["fc.weight.grad"]),
                          relative(forced["fc.bias"] / total, dumps[0]["fc.bias.grad"]))
        row["free_loss"] = abs(loss_sum - dumped_loss) / abs(dumped_loss)
        row["loss_value"] = loss_sum / total
        for n, q in head + trained:
            q.grad = (grads[n] / total).float()
        group = optimizer.param_groups[-1]  # fc's
        row["lr_value"] = group["lr"]
        row["lr"] = abs(group["lr"] - dumps[0]["lr"].item()) / group["lr"]
        row["beta1"] = abs(group["betas"][0] - dumps[0]["beta1"].item()) / group["betas"][0]
        text = ""
        if stages:
            lr = optimizer.param_groups[0]["lr"]
            row["lr_backbone_value"] = lr
            row["lr_backbone"] = worst(abs(lr - d["lr_backbone"].item()) / lr if "lr_backbone" in d else 1.0
                                       for d in dumps)
            names = [n for n, _ in trained + head]
            row["before"] = worst(relative(d[n + ".before"], previous[r][n])
                                  for r, d in enumerate(dumps) for n in names)
            after = forced_adam.step(dumps[0], names, ranks)
            row["after"] = worst(relative(after[n], d[n + ".after"]) for d in dumps for n in names)
            for r, d in enumerate(dumps):
                previous[r].update({n: d[n + ".after"] for n in names})
            text = (f", backbone lr {lr:.6g} (rel diff {row['lr_backbone']:.1e}), before {row['before']:.1e}, "
                    f"after {row['after']:.1e}")
            if trained:
                row["backbone_grad"], row["backbone_grad_worst"] = worst(
                    ((relative(forced[n] / total, d[n + ".grad"]), n) for n, _ in trained for d in dumps),
                    key=lambda t: t[0])
                text += (f", {len(trained)} backbone parameters: grad {row['backbone_grad']:.1e} "
                         f"({row['backbone_grad_worst']})")
        optimizer.step()
        accelerate_steps(scheduler, ranks)
        optimizer.zero_grad()
        row["head"] = max(relative(model.fc.weight, dumps[0]["fc.weight.after"]),
                          relative(model.fc.bias, dumps[0]["fc.bias.after"]))
        if trained:
            row["free_backbone"] = worst(relative(q, dumps[0][n + ".after"]) for n, q in trained)
            text += f", free running {row['free_backbone']:.1e} (not judged, nor the head)"
        row["buffers"] = buffers_diff
        if a.images:
            row["input_grey_levels"] = worst_input
        rows.append(row)
        print(f"step {step}: loss {row['loss_value']:.5f} (rel diff {row['loss']:.1e}; free running "
              f"{row['free_loss']:.1e}), lr {row['lr_value']:.6g} (rel diff {row['lr']:.1e}), "
              f"grad {row['grad']:.1e}, head {row['head']:.1e}, BN buffers {row['buffers']:.1e}" +
              (f", inputs {worst_input:.2f} grey levels" if a.images else "") + text)
        for key in ORDER:
            judged = key in row and not (trained and key in FREE_RUNNING)
            if first is None and judged and not row[key] <= tolerance[key]:
                first = (step, key, row[key])
        step += 1
    if step == 0:
        p.error(a.dir + ": no step-0-rank-0.safetensors")
    trained_text = f", {UNFREEZE[stages]} on from epoch {unfreeze_epoch}" if stages else ""
    verdict = (f"first difference: step {first[0]}, {first[1]} {first[2]:.3g} (tolerance {tolerance[first[1]]:g})"
               if first else f"agree: {step} steps at {ranks} ranks within tolerance{trained_text}")
    print(verdict)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"run": run, "steps": rows, "tolerance": tolerance, "verdict": verdict}, f, indent=1)
    return 1 if first else 0


if __name__ == "__main__":
    sys.exit(main())
