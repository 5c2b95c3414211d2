#!/usr/bin/env python3
"""The ceilings pets_train's GPU figures are compared with, measured with the node's own PyTorch:
the tutorial's frozen-backbone training step (timm's resnet50d, train-mode BatchNorm,
channels-last, cross-entropy, backward, Adam on the head) eager and under torch.compile, and the
inference forward (eval-mode BatchNorm) eager and compiled. Random inputs: only the speed counts.

Prints one JSON object (and writes it to --report): per measurement, images/s and the seconds the
first call took (torch.compile's compilation). Measurements run in order of importance and stop
when --budget-s is spent (the rest are reported as skipped). Without timm the model is the one of
bench/python_step.py (the same network written out); without CUDA it runs on the CPU, which only
checks this script (--smoke: tiny sizes).

usage: bench/torch_ceilings.py [--device cuda] [--batch 128] [--eval-batch 256] [--image-size 224]
       [--min-seconds 2] [--budget-s 200] [--only NAME,...] [--smoke] [--report FILE]
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def make_model(num_classes):
    try:
        from timm import create_model

        return create_model("resnet50d", pretrained=False, num_classes=num_classes), "timm"
    except ImportError:
        sys.path.insert(0, HERE)
        from python_step import ResNet50d

        return ResNet50d(num_classes), "bench/python_step.py"


def frozen(model):
    for p in model.parameters():
        p.requires_grad = False
    for p in model.fc.parameters():
        p.requires_grad = True
    return model


def timed(fn, sync, min_seconds, min_iters):
    """Seconds of the first call, then (iterations, seconds) of a timed loop after one warm-up."""
    start = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - start
    fn()
    sync()
    iters, start = 0, time.perf_counter()
    while iters < min_iters or time.perf_counter() - start < min_seconds:
        fn()
        iters += 1
    sync()
    return first, iters, time.perf_counter() - start


def train_step(model, dtype, batch, size, device):
    x = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 37, (batch,), device=device)
    opt = torch.optim.Adam(model.fc.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    model.train()

    def step():
        with torch.autocast(device.type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    return step


def forward(model, dtype, batch, size, device):
    x = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=torch.channels_last)
    model.eval()

    def run():
        with torch.no_grad(), torch.autocast(device.type, dtype=dtype):
            model(x)

    return run


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--eval-batch", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--min-seconds", type=float, default=2.0)
    p.add_argument("--budget-s", type=float, default=200.0)
    p.add_argument("--only", default="", help="comma-separated measurement names")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, eager only: checks the script")
    p.add_argument("--report", default="")
    a = p.parse_args()
    if a.smoke:
        a.batch, a.eval_batch, a.image_size, a.min_seconds = 2, 2, 64, 0.0
    device = torch.device(a.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    bf16, fp16 = torch.bfloat16, torch.float16
    # Name, kind, dtype, compiled: in order of importance (device_report.py's targets' first).
    plan = [("step_bf16_compiled", "step", bf16, True), ("forward_bf16_compiled", "forward", bf16, True),
            ("step_bf16_eager", "step", bf16, False), ("step_fp16_eager", "step", fp16, False),
            ("forward_bf16_eager", "forward", bf16, False), ("step_fp16_compiled", "step", fp16, True)]
    if a.only:
        wanted = a.only.split(",")
        unknown = sorted(set(wanted) - {n for n, *_ in plan})
        if unknown:
            p.error("--only: unknown measurement(s) " + ", ".join(unknown))
        plan = [m for m in plan if m[0] in wanted]
    if a.smoke:
        plan = [m for m in plan if not m[3]]
    out = {"torch": torch.__version__, "device": str(device), "batch": a.batch,
           "eval_batch": a.eval_batch, "image_size": a.image_size, "measurements": {}}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    t0 = time.perf_counter()
    for name, kind, dtype, compiled in plan:
        left = a.budget_s - (time.perf_counter() - t0)
        # A compilation takes about a minute: none is started with less left than that.
        if left < (60 if compiled else 10):
            out["measurements"][name] = {"status": "skipped: out of time"}
            continue
        if compiled:
            torch._dynamo.reset()
        model, source = make_model(37)
        model = frozen(model).to(device).to(memory_format=torch.channels_last)
        out["model"] = source
        net = torch.compile(model) if compiled else model
        batch = a.batch if kind == "step" else a.eval_batch
        fn = (train_step if kind == "step" else forward)(net, dtype, batch, a.image_size, device)
        try:
            first, iters, secs = timed(fn, sync, a.min_seconds, 2 if a.smoke else 5)
            out["measurements"][name] = {"status": "passed", "images_per_s": iters * batch / secs,
                                         "iterations": iters, "first_call_seconds": first}
        except Exception as e:  # a failed compilation is a figure missing, not a crash
            out["measurements"][name] = {"status": "failed: " + type(e).__name__ + ": " + str(e)[:300]}
        del model, net, fn
        if device.type == "cuda":
            torch.cuda.empty_cache()
    out["seconds"] = time.perf_counter() - t0
    text = json.dumps(out, indent=1)
    if a.report:
        with open(a.report, "w") as f:
            f.write(text + "\n")
    print(text)
    return 1 if any(m["status"].startswith("failed") for m in out["measurements"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
