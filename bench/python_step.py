#!/usr/bin/python3
"""The training step of the Python tutorial, in PyTorch on the CPU or a CUDA device, with a frozen or
a partly trained backbone: the reference that bench/README.md compares pets_bench's `model_step`
(and `--step-only`) against on the same machine.

timm's resnet50d (deep stem, avg-down shortcuts) is written out here because timm is not packaged
for Debian; the step is the tutorial's: the model in train mode (BatchNorm on batch statistics),
channels-last, cross-entropy, backward, then torch's Adam and OneCycleLR step, as pets_train's step
(pets::train::TrainStep) runs them. `--unfreeze` trains the backbone's last stages as pets_train's
option of that name does: `none` only `fc` (the tutorial's frozen backbone), `layer4` layer4 and fc,
`layer3` layer3, layer4 and fc, ..., `all` every parameter, the stem included; BatchNorm weights and
biases of a trained stage train. As a user with `requires_grad=False` on the frozen prefix writes
it: the frozen stages run under `torch.no_grad()` (no activation kept for them), the trained ones
with autograd. The trained backbone is an Adam parameter group of its own at 0.1 times the head's
rates (`--backbone-lr-ratio`'s default). Under bf16 the backbone runs in autocast and `fc` on its
float32 features, as pets_train does. One process is one rank: there is no allreduce (pets_train
runs its one-rank allreduce; bench/unfreeze_bench.sh times it as a phase of ours).

Needs a torch from 1.13 on: on the CPU Debian's python3-torch (the LibTorch 1.13 that pets_train
links there); with `--device cuda` the torch whose LibTorch pets_train loads (the device check:
the GPU node's torch 2.11), cuDNN and TF32 left at their defaults as pets_train leaves them, each
step ending with torch.cuda.synchronize() as ours ends reading its loss. Prints one JSON line per
precision: the mean and each timed step's seconds, images/s, the process's peak resident memory so
far (`maxrss_kib`, getrusage; run one precision per process for that precision's own peaks); on
the CPU the time of each phase of the step (zero_grad, frozen_forward, trained_forward with the
head and the loss, backward, optimizer), on a CUDA device instead the caching allocator's peaks
(`cuda_peak_allocated_bytes`, `cuda_peak_reserved_bytes`: torch.cuda.max_memory_allocated and
max_memory_reserved; the phases would need a wait for the device each).

usage: bench/python_step.py [--device cpu|cuda] [--threads N] [--batch 64] [--image-size 224]
       [--steps 3] [--warmup 1] [--unfreeze none|layer4|layer3|layer2|layer1|all]
       [--precision fp32|bf16|both]
"""
import argparse
import json
import os
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

UNFREEZE = ("none", "layer4", "layer3", "layer2", "layer1", "all")


class Bottleneck(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        out = planes * 4
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or cin != out:
            pool = (nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False)
                    if stride > 1 else nn.Identity())
            self.downsample = nn.Sequential(pool, nn.Conv2d(cin, out, 1, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        x = F.relu(self.bn1(self.conv1(x)), inplace=True)
        x = F.relu(self.bn2(self.conv2(x)), inplace=True)
        x = self.bn3(self.conv3(x))
        return F.relu(x + shortcut, inplace=True)


class ResNet50d(nn.Module):
    STAGES = 5  # the stem, layer1 .. layer4

    def __init__(self, num_classes=37):
        super().__init__()
        self.conv1 = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, 3, 1, 1, bias=False))
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            seq = []
            for i in range(blocks):
                seq.append(Bottleneck(cin, planes, stride if i == 0 else 1))
                cin = planes * 4
            layers.append(nn.Sequential(*seq))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(2048, num_classes)

    def forward_stages(self, x, begin, end):
        """Stages [begin, end): 0 the stem (with its max pool), 1..4 layer1..layer4."""
        for stage in range(begin, end):
            if stage == 0:
                x = self.maxpool(F.relu(self.bn1(self.conv1(x)), inplace=True))
            else:
                x = getattr(self, f"layer{stage}")(x)
        return x

    @staticmethod
    def pool(x):
        return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)

    def forward(self, x):
        return self.fc(self.pool(self.forward_stages(x, 0, self.STAGES)))


def first_trained_stage(unfreeze):
    """pets_train's numbering: 5 for none (nothing of the backbone trains), 0 for all."""
    return ResNet50d.STAGES - UNFREEZE.index(unfreeze)


def in_trained_stage(name, first):
    prefixes = ["conv1.", "bn1.", "layer1.", "layer2.", "layer3.", "layer4."]
    stage_of = {p: (0 if i < 2 else i - 1) for i, p in enumerate(prefixes)}
    return any(name.startswith(p) and stage_of[p] >= first for p in prefixes)


def peak_rss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=3, help="timed steps")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--unfreeze", choices=UNFREEZE, default="none")
    p.add_argument("--backbone-lr-ratio", type=float, default=0.1)
    p.add_argument("--max-lr", type=float, default=3e-2)
    p.add_argument("--precision", choices=("fp32", "bf16", "both"), default="both")
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this torch (%s) sees no CUDA device" % torch.__version__)
    device = torch.device(a.device)
    on_cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    torch.set_num_threads(a.threads if a.threads > 0 else len(os.sched_getaffinity(0)))
    torch.manual_seed(0)
    first = first_trained_stage(a.unfreeze)
    model = ResNet50d().to(device=device, memory_format=torch.channels_last)
    backbone = []
    for name, param in model.named_parameters():
        trained = name.startswith("fc.") or in_trained_stage(name, first)
        param.requires_grad = trained
        if trained and not name.startswith("fc."):
            backbone.append(param)
    model.train()
    # NHWC, as pets_train's loader delivers a batch: channels-last already, no copy in the step.
    images = torch.randn(a.batch, 3, a.image_size, a.image_size, device=device).contiguous(
        memory_format=torch.channels_last)
    labels = torch.randint(0, 37, (a.batch,), device=device)
    precisions = ("fp32", "bf16") if a.precision == "both" else (a.precision,)
    for precision in precisions:
        groups = [{"params": list(model.fc.parameters()), "lr": a.max_lr / 25}]
        max_lr = [a.max_lr]
        if backbone:  # placed first, as the tutorial's two groups
            groups.insert(0, {"params": backbone, "lr": a.backbone_lr_ratio * a.max_lr / 25})
            max_lr.insert(0, a.backbone_lr_ratio * a.max_lr)
        optimizer = torch.optim.Adam(groups)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr,
                                                       total_steps=1 << 30)
        phases = {k: 0.0 for k in ("zero_grad", "frozen_forward", "trained_forward", "backward",
                                   "optimizer")}

        def step(timed):
            t0 = time.perf_counter()
            optimizer.zero_grad()
            t1 = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                with torch.no_grad():
                    x = model.forward_stages(images, 0, first)
                t2 = time.perf_counter()
                features = model.pool(model.forward_stages(x, first, ResNet50d.STAGES))
            loss = F.cross_entropy(model.fc(features.float()), labels)
            t3 = time.perf_counter()
            loss.backward()
            t4 = time.perf_counter()
            optimizer.step()
            schedule.step()
            sync()
            t5 = time.perf_counter()
            if timed:
                for k, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                    phases[k] += dt
            return t5 - t0

        for _ in range(a.warmup):
            step(False)
        times = [step(True) for _ in range(a.steps)]
        mean = sum(times) / len(times)
        out = {
            "side": "pytorch", "precision": precision, "unfreeze": a.unfreeze,
            "device": a.device, "threads": torch.get_num_threads(), "batch": a.batch,
            "image_size": a.image_size, "warmup": a.warmup, "steps": a.steps,
            "seconds_per_step": mean, "step_seconds": times, "images_per_s": a.batch / mean,
            "trained_parameters": sum(q.numel() for q in backbone) + sum(
                q.numel() for q in model.fc.parameters()),
            "maxrss_kib": peak_rss_kib(), "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
            "torch": torch.__version__}
        if on_cuda:
            out["gpu"] = torch.cuda.get_device_name(device)
            out["cuda_peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
            out["cuda_peak_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
        else:
            out["phases_seconds"] = {k: v / a.steps for k, v in phases.items()}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
