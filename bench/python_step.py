#!/usr/bin/python3
"""The frozen-backbone training step of the Python tutorial, in PyTorch on the CPU: the reference
that bench/README.md compares pets_bench's `model_step` against on the same machine.

timm's resnet50d (deep stem, avg-down shortcuts) is written out here because timm is not packaged
for Debian; the step is the tutorial's: every parameter frozen except `fc`, the model in train
mode (BatchNorm on batch statistics), channels-last, cross-entropy, backward, no optimiser step
(pets_bench leaves it out too). Needs Debian's python3-torch (the same LibTorch 1.13 that
pets_train links). Prints one JSON line per precision.

usage: bench/python_step.py [--threads N] [--batch 64] [--steps 3] [--warmup 1]
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x)), inplace=True))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = ResNet50d().to(memory_format=torch.channels_last)
    for name, param in model.named_parameters():
        param.requires_grad = name.startswith("fc.")
    model.train()
    images = torch.randn(a.batch, 3, 224, 224)
    labels = torch.randint(0, 37, (a.batch,))
    for precision in ("fp32", "bf16"):
        def step():
            x = images.contiguous(memory_format=torch.channels_last)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), labels)
            loss.backward()
            model.fc.weight.grad = None
            model.fc.bias.grad = None
        for _ in range(a.warmup):
            step()
        times = []
        for _ in range(a.steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        mean = sum(times) / len(times)
        print(json.dumps({"precision": precision, "threads": torch.get_num_threads(),
                          "batch": a.batch, "steps": a.steps, "seconds_per_step": mean,
                          "images_per_s": a.batch / mean, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
