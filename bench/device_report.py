#!/usr/bin/env python3
"""The device check's one JSON report, from the parts bench/device_check.py wrote (one JSON file
each: name, status, seconds, figures, log tail), with the GPU targets read from those figures:

  e2e_*          pets_train end to end (np1_bf16, batch 128, train-mode BN): every epoch after the
                 first at least 16,000 training images/s, the first at least 90 % of that, the
                 loader's wait at most 2 % in every epoch; the --bn-mode eval run at least 20,000
  step_*         the model-only step: bf16 at least 16,000 images/s, and no slower than fp16
  folded_*       evaluation, which always runs folded, at least 25,000 images/s end to end
  whole_job_*    pets_preprocess plus the 5-epoch pets_train, start-up included, at most a fifth
                 of the tutorial's 5-epoch job on the same images
  *_over_*       pets_train against the node's own PyTorch ceilings of the same run
  deterministic_* --deterministic: two runs' models the same bit for bit, and its cost (the
                 steady training rate of np1_bf16_deterministic over np1_bf16's)
  loader_threads the steady training rate and loader wait of np1_bf16 (automatic loader threads)
                 against --loader-threads 8 and 15, where those runs exist
  fused_batchnorm_* the steady training rate with the fused train-mode BatchNorm kernel (np1_bf16,
                 np1_fp16) over LibTorch's BatchNorm, ReLU and add (PETS_NATIVE_BATCHNORM=1)
  fused_conv_*   the steady training rate of the folded backbone (np1_bf16_bn_eval) with cuDNN's
                 fused convolution + bias (+ add) + ReLU over LibTorch's (PETS_NATIVE_CONV=1)
  warm_up_*      the first epoch over the later ones with the warm-up forward before it (np1_bf16)
                 and without (PETS_NO_WARM_UP=1), and the two runs' seconds outside their epochs
                 (start-up, checkpoints, the end)
  unfreeze_*     a trained backbone in bf16 (--unfreeze layer4 and all, batch 64, 224 px): our step
                 over PyTorch's eager step for the same model with the node's torch, in images/s
                 (at least 1.0) and in peak device memory (the caching allocator's, allocated and
                 reserved); the --unfreeze layer4 training run's images/s per epoch

A target whose figures are missing is absent; `not_measured` says why when there is no GPU.

usage: bench/device_report.py PARTS_DIR OUT_JSON SECONDS SCRIPT_STATUS
"""
import glob
import json
import os
import statistics
import sys
import time


def get(d, *path):
    for key in path:
        if isinstance(d, dict) and key in d:
            d = d[key]
        elif isinstance(d, list) and isinstance(key, int) and -len(d) <= key < len(d):
            d = d[key]
        else:
            return None
    return d


def epoch_figures(run):
    """Per-epoch training images/s and loader wait shares of one end-to-end run."""
    epochs = get(run, "per_epoch") or []
    return ([e.get("train_images_per_s") for e in epochs], [e.get("loader_wait_share") for e in epochs])


def targets_of(by):
    m = get(by, "harness_measure", "figures") or {}
    e = get(by, "harness_end_to_end", "figures") or {}
    if m.get("device") != "cuda" and get(by, "gpu", "status") != "passed":
        return {"not_measured": "no GPU: the targets are GPU figures"}
    t = {}
    runs = get(e, "end_to_end", "runs") or {}
    rates, waits = epoch_figures(runs.get("np1_bf16"))
    if len(rates) >= 2 and None not in rates:
        steady = rates[1:]
        t["e2e_bf16_images_per_s_by_epoch"] = rates
        t["e2e_bf16_steady_min"] = min(steady)
        t["e2e_bf16_steady_at_least_16000"] = min(steady) >= 16000
        t["e2e_bf16_first_over_steady"] = rates[0] / statistics.median(steady)
        t["e2e_bf16_first_at_least_90_percent"] = t["e2e_bf16_first_over_steady"] >= 0.9
    if waits and None not in waits:
        t["loader_wait_share_by_epoch"] = waits
        t["loader_wait_at_most_2_percent_every_epoch"] = max(waits) <= 0.02
    eval_rates, _ = epoch_figures(runs.get("np1_bf16_bn_eval"))
    if len(eval_rates) >= 2 and None not in eval_rates:
        t["e2e_bn_eval_steady_min"] = min(eval_rates[1:])
        t["e2e_bn_eval_at_least_20000"] = min(eval_rates[1:]) >= 20000
    folded = get(runs, "np1_bf16", "eval_images_per_s")
    if folded:
        t["folded_evaluation_images_per_s"] = folded
        t["folded_evaluation_at_least_25000"] = folded >= 25000
    bf16, fp16 = get(m, "model_step", "bf16", "images_per_s"), get(m, "model_step", "fp16", "images_per_s")
    if bf16:
        t["step_bf16_images_per_s"] = bf16
        t["step_bf16_at_least_16000"] = bf16 >= 16000
    if bf16 and fp16:
        t["step_bf16_no_slower_than_fp16"] = bf16 >= fp16
    for precision in ("fp32", "bf16", "fp16"):
        waits = get(m, "model_step", precision, "device_waits_per_step")
        if waits is not None:
            t["step_device_waits_" + precision] = waits
    ceilings = get(by, "torch_ceilings", "figures", "measurements") or {}
    compiled = get(ceilings, "step_bf16_compiled", "images_per_s")
    if compiled and bf16:
        t["step_bf16_over_compiled_step"] = bf16 / compiled
    if compiled and len(rates) >= 2 and None not in rates:
        t["e2e_bf16_steady_over_compiled_step"] = min(rates[1:]) / compiled
    forward = get(ceilings, "forward_bf16_compiled", "images_per_s")
    if forward and folded:
        t["folded_evaluation_over_compiled_forward"] = folded / forward
    bitwise = get(by, "determinism_bitwise", "status")
    if bitwise is not None and not bitwise.startswith("skipped"):
        t["deterministic_bitwise_same_models"] = bitwise == "passed"
    det_rates, _ = epoch_figures(runs.get("np1_bf16_deterministic"))
    if len(det_rates) >= 2 and None not in det_rates and len(rates) >= 2 and None not in rates:
        t["deterministic_steady_over_default"] = statistics.median(det_rates[1:]) / statistics.median(rates[1:])
    threads = {}
    for name in ("np1_bf16", "np1_bf16_loader8", "np1_bf16_loader15"):
        r, w = epoch_figures(runs.get(name))
        if len(r) >= 2 and None not in r and None not in w:
            threads[name] = {"steady_images_per_s": statistics.median(r[1:]),
                             "steady_loader_wait_share": statistics.median(w[1:])}
    if len(threads) > 1:
        t["loader_threads"] = threads
    for precision in ("bf16", "fp16"):
        fused, _ = epoch_figures(runs.get("np1_" + precision))
        native, _ = epoch_figures(runs.get("np1_%s_native_bn" % precision))
        if len(fused) >= 2 and len(native) >= 2 and None not in fused + native:
            t["fused_batchnorm_%s_steady_over_native" % precision] = (
                statistics.median(fused[1:]) / statistics.median(native[1:]))
    fused, _ = epoch_figures(runs.get("np1_bf16_bn_eval"))
    native, _ = epoch_figures(runs.get("np1_bf16_bn_eval_native_conv"))
    if len(fused) >= 2 and len(native) >= 2 and None not in fused + native:
        t["fused_conv_bf16_bn_eval_steady_over_native"] = (
            statistics.median(fused[1:]) / statistics.median(native[1:]))
    no_warm, _ = epoch_figures(runs.get("np1_bf16_no_warm_up"))
    if len(rates) >= 2 and len(no_warm) >= 2 and None not in rates + no_warm:
        t["warm_up_first_over_steady"] = rates[0] / statistics.median(rates[1:])
        t["no_warm_up_first_over_steady"] = no_warm[0] / statistics.median(no_warm[1:])
        for name, key in (("np1_bf16", "warm_up_outside_epochs_seconds"),
                          ("np1_bf16_no_warm_up", "no_warm_up_outside_epochs_seconds")):
            outside = get(runs, name, "outside_epochs_seconds")
            if outside is not None:
                t[key] = outside
    t.update(unfreeze_targets(by))
    prep = get(by, "harness_data", "figures", "preprocess_seconds")
    train_wall = get(runs, "np1_bf16", "wall_seconds")
    tutorial = get(by, "tutorial_5_epochs", "figures", "wall_seconds")
    if prep and train_wall and get(runs, "np1_bf16", "epochs") == 5:
        t["whole_job_seconds"] = prep + train_wall
        if tutorial:
            t["tutorial_job_seconds"] = tutorial
            t["whole_job_over_tutorial"] = (prep + train_wall) / tutorial
            t["whole_job_at_most_a_fifth"] = (prep + train_wall) / tutorial <= 0.2
    return t


def unfreeze_targets(by):
    """Ours over PyTorch per --unfreeze configuration (bf16), each figure where both sides have it."""
    t = {}
    for unfreeze in ("layer4", "all"):
        ours = get(by, "unfreeze_step_" + unfreeze, "figures", "step_only") or {}
        theirs = get(by, "unfreeze_step_%s_pytorch" % unfreeze, "figures") or {}
        key = "unfreeze_bf16_" + unfreeze
        for field, name in (("images_per_s", "images_per_s"),
                            ("cuda_peak_allocated_bytes", "peak_allocated_bytes"),
                            ("cuda_peak_reserved_bytes", "peak_reserved_bytes")):
            if ours.get(field) and theirs.get(field):
                t["%s_%s" % (key, name)] = {"ours": ours[field], "pytorch": theirs[field]}
                t["%s_%s_ours_over_pytorch" % (key, name)] = ours[field] / theirs[field]
        if key + "_images_per_s" in t:
            t[key + "_at_least_pytorch"] = t[key + "_images_per_s_ours_over_pytorch"] >= 1.0
    rates = get(by, "unfreeze_train_layer4", "figures", "train_images_per_s")
    if rates and None not in rates:
        t["unfreeze_train_layer4_images_per_s_by_epoch"] = rates
    return t


def main():
    if len(sys.argv) != 5:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    parts_dir, out, secs, rc = sys.argv[1:5]
    parts = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(parts_dir, "*.json")))]
    by = {p["name"]: p for p in parts}
    targets = targets_of(by)
    report = {"schema": "pets_device_check/2", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "seconds": int(secs), "script_status": int(rc),
              "summary": {p["name"]: p["status"] for p in parts}, "targets": targets, "parts": parts}
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, out)
    print("device_check: report " + out, file=sys.stderr)
    for p in parts:
        print(f"  {p['name']:<30} {p['status']}", file=sys.stderr)
    for k, v in targets.items():
        print(f"  target {k}: {v}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
