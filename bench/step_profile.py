#!/usr/bin/env python3
"""Where the GPU time of the tutorial's step goes, measured with the node's own PyTorch profiler:
the frozen-backbone training step of bench/torch_ceilings.py (timm's resnet50d, train-mode
BatchNorm, channels-last, autocast, cross-entropy, backward and Adam on the head) in bf16 and fp16,
and the inference forward (eval-mode BatchNorm) in bf16, all eager. pets_train runs the same
kernels (LibTorch's eager operators), so this is the breakdown its step has too.

Per measurement: the device time per step, split into kinds of kernel (convolution and matrix
products, BatchNorm, element-wise, reductions, layout changes, copies, other) by kernel name, and
the kernels that take the most time. One JSON object on stdout (and in --report). Without CUDA it
profiles the CPU operators instead, which only checks this script (--smoke: tiny sizes).

usage: bench/step_profile.py [--device cuda] [--batch 128] [--eval-batch 256] [--image-size 224]
       [--steps 10] [--top 25] [--smoke] [--report FILE]
"""
import argparse
import json
import os
import re
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ceilings import forward, frozen, make_model, train_step  # noqa: E402

# Kinds of kernel, by name, first match wins.
KINDS = [
    ("batchnorm", r"batch_norm|batchnorm|bn_|welford"),
    ("conv_gemm", r"conv|cudnn|xmma|implicit|gemm|sm\d\d_|cutlass|wgmma|addmm|\bmm\b"),
    ("layout", r"nchw|nhwc|transpose|permute"),
    ("reduction", r"reduce|pool|softmax|nll|cross_entropy|sum"),
    ("elementwise", r"elementwise|vectorized|unrolled|relu|clamp|add|mul|fill|adam|foreach|cast"),
    ("copy", r"memcpy|memset|copy"),
]


def kind_of(name):
    low = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, low):
            return kind
    return "other"


def profile_fn(fn, sync, steps, device, top):
    """Device (or CPU) time per call of fn, by kind and by kernel, over `steps` calls."""
    for _ in range(3):  # warm-up: cuDNN's choices, the allocator
        fn()
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            fn()
        sync()
    wall = (time.perf_counter() - start) / steps
    kernels = {}
    for e in prof.events():
        if device.type == "cuda":
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            us = e.device_time
        else:  # the CPU's leaf operators stand in for kernels
            if e.cpu_children:
                continue
            us = e.self_cpu_time_total
        k = kernels.setdefault(e.name, {"us": 0.0, "calls": 0})
        k["us"] += us
        k["calls"] += 1
    total = sum(k["us"] for k in kernels.values()) / steps
    by_kind = {}
    for name, k in kernels.items():
        by_kind[kind_of(name)] = by_kind.get(kind_of(name), 0.0) + k["us"] / steps
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1]["us"])[:top]
    return {
        "wall_us_per_call": wall * 1e6,
        "device_us_per_call": total,
        "kernels_per_call": sum(k["calls"] for k in kernels.values()) / steps,
        "by_kind_us": {k: round(v, 1) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top": [{"name": n[:160], "kind": kind_of(n), "us_per_call": round(k["us"] / steps, 1),
                 "calls_per_call": k["calls"] / steps} for n, k in ranked],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--eval-batch", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script")
    p.add_argument("--report", default="")
    a = p.parse_args()
    if a.smoke:
        a.batch, a.eval_batch, a.image_size, a.steps, a.top = 2, 2, 64, 2, 5
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    sync = (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)
    model, source = make_model(37)
    model = frozen(model).to(device).to(memory_format=torch.channels_last)
    runs = [("step_bf16", lambda: train_step(model, torch.bfloat16, a.batch, a.image_size, device), a.batch),
            ("forward_bf16", lambda: forward(model, torch.bfloat16, a.eval_batch, a.image_size, device),
             a.eval_batch)]
    if device.type == "cuda":
        runs.insert(1, ("step_fp16", lambda: train_step(model, torch.float16, a.batch, a.image_size, device),
                        a.batch))
    out = {"torch": torch.__version__, "device": device.type, "model": source, "batch": a.batch,
           "eval_batch": a.eval_batch, "image_size": a.image_size, "steps": a.steps,
           "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
           "profiles": {}}
    for name, make, batch in runs:
        r = profile_fn(make(), sync, a.steps, device, a.top)
        r["images_per_s_profiled"] = batch / (r["wall_us_per_call"] * 1e-6)
        out["profiles"][name] = r
        print(f"step_profile: {name}: {r['device_us_per_call']:.0f} us of kernels per call "
              f"({r['kernels_per_call']:.0f} kernels), {r['by_kind_us']}", file=sys.stderr)
    text = json.dumps(out, indent=1)
    print(text)
    if a.report:
        with open(a.report, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
