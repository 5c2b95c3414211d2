#!/usr/bin/env python3
"""bench/device_report.py's targets, from parts written as bench/device_check.py writes them: a
GPU run meeting every target, one missing several, a run without a GPU (no target claimed), and
a report missing figures (those targets absent, never guessed)."""
import json
import os
import subprocess
import sys
import tempfile

REPORT = sys.argv[1]  # bench/device_report.py


def run_report(parts, statuses=None):
    with tempfile.TemporaryDirectory() as d:
        pdir = os.path.join(d, "parts")
        os.mkdir(pdir)
        for i, (name, figures) in enumerate(parts.items()):
            with open(os.path.join(pdir, f"{i:02d}_{name}.json"), "w") as f:
                json.dump({"name": name, "status": (statuses or {}).get(name, "passed"), "seconds": 1,
                           "figures": figures,
                           "log_tail": ""}, f)
        out = os.path.join(d, "report.json")
        subprocess.run([sys.executable, REPORT, pdir, out, "10", "0"], check=True,
                       stderr=subprocess.DEVNULL)
        return json.load(open(out))


def gpu_parts(e2e_rates, waits, bn_eval_rates, eval_rate, step_bf16, step_fp16, prep, wall, tutorial):
    def run(rates, w, wall_s):
        return {"epochs": len(rates), "wall_seconds": wall_s, "eval_images_per_s": eval_rate,
                "per_epoch": [{"train_images_per_s": r, "loader_wait_share": x} for r, x in zip(rates, w)]}
    return {
        "harness_data": {"preprocess_seconds": prep},
        "harness_measure": {"device": "cuda", "model_step": {"bf16": {"images_per_s": step_bf16},
                                                             "fp16": {"images_per_s": step_fp16}}},
        "harness_end_to_end": {"end_to_end": {"runs": {
            "np1_bf16": run(e2e_rates, waits, wall),
            "np1_bf16_bn_eval": run(bn_eval_rates, waits, wall)}}},
        "tutorial_5_epochs": {"wall_seconds": tutorial},
        "torch_ceilings": {"measurements": {"step_bf16_compiled": {"images_per_s": 15700.0},
                                            "forward_bf16_compiled": {"images_per_s": 24200.0}}},
    }


failures = []
# Every yes/no target a complete GPU report judges.
VERDICTS = ["e2e_bf16_steady_at_least_16000", "e2e_bf16_first_at_least_90_percent",
            "loader_wait_at_most_2_percent_every_epoch", "e2e_bn_eval_at_least_20000",
            "folded_evaluation_at_least_25000", "step_bf16_at_least_16000", "step_bf16_no_slower_than_fp16",
            "whole_job_at_most_a_fifth", "unfreeze_bf16_layer4_at_least_pytorch",
            "unfreeze_bf16_all_at_least_pytorch"]


def expect(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")


good_parts = gpu_parts([15500, 16500, 17000, 16800, 16900], [0.01] * 5, [19000, 21000, 22000, 21000, 21000],
                       26000, 16200, 15000, 10, 20, 300)
# --deterministic and --loader-threads runs beside np1_bf16: the cost is a ratio of steady medians.
runs = good_parts["harness_end_to_end"]["end_to_end"]["runs"]
runs["np1_bf16_deterministic"] = {"per_epoch": [{"train_images_per_s": r * 0.8, "loader_wait_share": 0.01}
                                                for r in [15500, 16500, 17000, 16800, 16900]]}
runs["np1_bf16_loader8"] = {"per_epoch": [{"train_images_per_s": r, "loader_wait_share": 0.005}
                                          for r in [15000, 17000, 17500]]}
# Without the warm-up forward the first epoch pays the first calls' set-up, and the start-up less.
runs["np1_bf16"]["outside_epochs_seconds"] = 4.0
runs["np1_bf16_no_warm_up"] = {"outside_epochs_seconds": 3.5,
                               "per_epoch": [{"train_images_per_s": r, "loader_wait_share": 0.01}
                                             for r in [8425, 16500, 17000, 16800, 16900]]}
good_parts["determinism_bitwise"] = {}


def unfreeze_parts(ours, pytorch, memory_ratio):
    """The unfreeze_* parts: per configuration our images/s and PyTorch's, our peaks at
    `memory_ratio` times PyTorch's 2 GiB allocated and 3 GiB reserved."""
    parts = {}
    for unfreeze in ("layer4", "all"):
        mib = {"cuda_peak_allocated_bytes": 2 << 30, "cuda_peak_reserved_bytes": 3 << 30}
        parts["unfreeze_step_" + unfreeze] = {"step_only": dict(
            {k: int(v * memory_ratio) for k, v in mib.items()}, images_per_s=ours[unfreeze])}
        parts["unfreeze_step_%s_pytorch" % unfreeze] = dict(mib, images_per_s=pytorch[unfreeze])
    parts["unfreeze_train_layer4"] = {"accuracy": [0.1, 0.2], "train_images_per_s": [900.0, 2100.0]}
    return parts


good_parts.update(unfreeze_parts({"layer4": 2400.0, "all": 1500.0}, {"layer4": 2000.0, "all": 1500.0}, 0.5))
good = run_report(good_parts)["targets"]
for key in VERDICTS:
    expect("good: " + key, good.get(key), True)
expect("good: whole job", good.get("whole_job_seconds"), 30)
expect("good: bitwise", good.get("deterministic_bitwise_same_models"), True)
expect("good: deterministic cost", round(good.get("deterministic_steady_over_default", 0), 4), 0.8)
expect("good: loader threads", good.get("loader_threads"),
       {"np1_bf16": {"steady_images_per_s": 16850.0, "steady_loader_wait_share": 0.01},
        "np1_bf16_loader8": {"steady_images_per_s": 17250.0, "steady_loader_wait_share": 0.005}})
expect("good: first over steady", round(good.get("e2e_bf16_first_over_steady", 0), 4), round(15500 / 16850, 4))
expect("good: warm-up first over steady", round(good.get("warm_up_first_over_steady", 0), 4),
       round(15500 / 16850, 4))
expect("good: no warm-up first over steady", good.get("no_warm_up_first_over_steady"), 0.5)
expect("good: unfreeze layer4", good.get("unfreeze_bf16_layer4_images_per_s_ours_over_pytorch"), 1.2)
expect("good: unfreeze layer4 figures", good.get("unfreeze_bf16_layer4_images_per_s"),
       {"ours": 2400.0, "pytorch": 2000.0})
expect("good: unfreeze all, equal is enough", good.get("unfreeze_bf16_all_at_least_pytorch"), True)
expect("good: unfreeze memory", [good.get("unfreeze_bf16_all_peak_allocated_bytes_ours_over_pytorch"),
                                 good.get("unfreeze_bf16_all_peak_reserved_bytes_ours_over_pytorch")],
       [0.5, 0.5])
expect("good: unfreeze training", good.get("unfreeze_train_layer4_images_per_s_by_epoch"), [900.0, 2100.0])
expect("good: outside the epochs", [good.get("warm_up_outside_epochs_seconds"),
                                    good.get("no_warm_up_outside_epochs_seconds")], [4.0, 3.5])

bad_parts = gpu_parts([2650, 5500, 5600, 5400, 5500], [0.3, 0.26, 0.38, 0.3, 0.3], [6900, 7500, 7000, 7100, 7200],
                      13000, 8300, 12000, 40, 45, 300)
bad_parts["determinism_bitwise"] = {}
bad_parts.update(unfreeze_parts({"layer4": 1900.0, "all": 1000.0}, {"layer4": 2000.0, "all": 1500.0}, 1.25))
bad = run_report(bad_parts, {"determinism_bitwise": "failed: the models differ run to run"})["targets"]
expect("bad: bitwise", bad.get("deterministic_bitwise_same_models"), False)
expect("bad: unfreeze all", round(bad.get("unfreeze_bf16_all_images_per_s_ours_over_pytorch", 0), 4), 0.6667)
expect("bad: unfreeze memory", bad.get("unfreeze_bf16_layer4_peak_reserved_bytes_ours_over_pytorch"), 1.25)
for key in VERDICTS:
    expect("bad: " + key, bad.get(key), False)

cpu = gpu_parts([1, 2], [0, 0], [1, 2], 1, 1, 1, 1, 1, 1)
cpu["harness_measure"]["device"] = "cpu"
expect("no GPU", list(run_report(cpu)["targets"]), ["not_measured"])

partial = gpu_parts([15000, 16500, 17000], [0.01] * 3, [1, 2], 26000, 16200, 15000, 10, 20, 300)
del partial["tutorial_5_epochs"], partial["harness_measure"]["model_step"]["fp16"]
# Our side of an --unfreeze step without PyTorch's (its step failed): no ratio.
partial["unfreeze_step_layer4"] = {"step_only": {"images_per_s": 2400.0}}
t = run_report(partial)["targets"]
expect("partial: no tutorial, no whole-job verdict", "whole_job_at_most_a_fifth" in t, False)
expect("partial: 3 epochs are not the 5-epoch job", "whole_job_seconds" in t, False)
expect("partial: no fp16, no comparison", "step_bf16_no_slower_than_fp16" in t, False)
for key in ("deterministic_bitwise_same_models", "deterministic_steady_over_default", "loader_threads",
            "warm_up_first_over_steady", "unfreeze_bf16_layer4_images_per_s_ours_over_pytorch",
            "unfreeze_bf16_layer4_at_least_pytorch", "unfreeze_train_layer4_images_per_s_by_epoch"):
    expect("partial: no such runs, no " + key, key in t, False)
expect("partial: the steady figure still judged", t.get("e2e_bf16_steady_at_least_16000"), True)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("device_report: targets judged as expected in 4 reports")
