#!/usr/bin/env python3
"""The device check's runner: the CUDA tests and the benchmark harness on a GPU node that has only
an NVIDIA driver, a shell and a python3 with torch 2.11.0+cu130 (no build tools, no network).
Python 3.8 or newer, standard library only; `bash bench/device_check.sh run` starts it.

It unpacks the bundle `bench/device_check.sh prepare` made (.device/pets_device.tar.xz), checks
that every program and component resolves inside the bundle, torch's folders or glibc, then runs
its steps, each under its own time limit within the budget (PETS_DEVICE_BUDGET_S, 460 s), so a
hang costs only that step:

  libraries, gpu                 the bundle's libraries; the GPU, driver and torch
  the CUDA tests                 every step of the bundle's device_manifest.json, which CMake
                                 writes from the tests labelled `cuda` (pets_device_step in
                                 tests/CMakeLists.txt): GoogleTest cases passed/failed/skipped
                                 and the parity test's measured errors
  device_input_bench             the device input's costs
  small_set, train_*,            short pets_train runs on 148 images (fp32, fp16, bf16 twice,
  determinism*                   --deterministic twice): the same accuracies, the same models
  unfreeze_step_*,               a trained backbone in bf16 (--unfreeze layer4 and all, 224 px,
  unfreeze_train_layer4          batch 64): our model step and PyTorch's eager one with the node's
                                 torch (bench/python_step.py), images/s and peak device memory;
                                 a short pets_train --unfreeze layer4 run on the 148 images
  harness_*                      pets_bench on 7,400 images: roofline, model step, loader, end to
                                 end (5 epochs per run)
  sweep_heads                    a --max-lr sweep of 8 heads against the single head on the same
                                 images, pairs of whole pets_train runs (bench/sweep_report.py):
                                 the wall-time ratio (target at most 1.10) and bytes_per_step
  tutorial_5_epochs,             the same job in Python with the node's torch (tutorial, profile
  step_profile, torch_ceilings   of the eager step, compiled ceilings)

Without a GPU the CUDA tests' CPU cases still run and must pass ("skipped: no GPU (CPU cases
passed)"), training and the harness run on the CPU at small sizes. The report, $OUT/device_check.json
(bench/device_report.py: summary, targets, parts with figures and log tails), and
$OUT/device_logs.tar.gz are written whatever fails; the exit status is 1 when a part failed.

Environment: OUT (required), PETS_DEVICE_DIR, PETS_DEVICE_PYTHON, PETS_DEVICE_WORK,
PETS_DEVICE_BUDGET_S, PETS_DEVICE_STEPS, PETS_DEVICE_PER_CLASS, PETS_DEVICE_BATCH,
PETS_DEVICE_E2E_RUNS, PETS_DEVICE_SWEEP, PETS_DEVICE_SWEEP_PAIRS (bench/device_check.sh --help says
what each does).
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

from device_report import get
from device_steps import (Check, check_libraries, die, gtest_figures, python_value, read_json,
                          run_figures, same_runs, status_of, unpack)
from sweep_report import summarise as sweep_summary

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The sweep_heads part: 8 heads against the single head (the tutorial's max-lr).
SWEEP = "1e-3,2e-3,5e-3,1e-2,2e-2,3e-2,5e-2,1e-1"
SWEEP_SINGLE = "3e-2"
E2E_RUNS = ("np1_bf16,np1_bf16_bn_eval,np1_fp16,np1,np1_bf16_loader8,np1_bf16_loader15,"
            "np1_bf16_deterministic,np1_bf16_native_bn,np1_fp16_native_bn,"
            "np1_bf16_bn_eval_native_conv,np1_bf16_no_warm_up")


def run_checks(check, bundle, py):
    w = check.work
    b = os.path.join(w, "bundle")
    unpack(bundle, b)
    torch_dir = python_value(py, "import torch, os; print(os.path.dirname(torch.__file__))")
    if not torch_dir:
        die("%s cannot import torch" % py)
    site = os.path.dirname(torch_dir)
    # The programs' RUNPATH is empty: the bundle's libraries, torch's and its nvidia/ packages'.
    libs = ":".join([b + "/lib", torch_dir + "/lib"] + sorted(glob.glob(site + "/nvidia/*/lib")))
    for var in ("OPAL", "PMIX"):
        pkg = "openmpi" if var == "OPAL" else "pmix"
        os.environ.update({var + "_PREFIX": b, var + "_EXEC_PREFIX": b, var + "_BINDIR": b + "/bin",
                           var + "_LIBDIR": b + "/lib", var + "_PKGLIBDIR": b + "/lib/" + pkg,
                           var + "_DATAROOTDIR": b + "/share", var + "_DATADIR": b + "/share",
                           var + "_PKGDATADIR": b + "/share/" + pkg, var + "_SYSCONFDIR": b + "/etc"})
    os.environ.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                       # Containers and microVMs refuse the cross-memory attach of vader's single copy.
                       "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
                       "OMPI_MCA_rmaps_base_oversubscribe": "1",
                       "PATH": b + "/bin:" + os.environ.get("PATH", ""),
                       "PETS_RESNET_FIXTURE": os.path.join(ROOT, "tests", "fixtures", "resnet50d")})
    check_libraries(check, b, site, libs, bundle)

    have_gpu = python_value(py, "import torch; print(int(torch.cuda.is_available()))") == "1"
    gpu = "none"
    with open(check.log("gpu"), "w") as f:
        try:
            subprocess.run(["nvidia-smi"], stdout=f, stderr=subprocess.STDOUT)
            if have_gpu:
                r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                    "--format=csv,noheader"], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, universal_newlines=True)
                gpu = (r.stdout.splitlines() or [""])[0]
        except OSError:
            f.write("no nvidia-smi\n")
            gpu = "" if have_gpu else gpu
    cores = len(os.sched_getaffinity(0))
    check.part("gpu", "passed" if have_gpu else "skipped: no GPU", 0,
               {"gpu": gpu, "torch": python_value(py, "import torch; print(torch.__version__)"),
                "cores": cores}, check.log("gpu"))
    dev = "cuda" if have_gpu else "cpu"
    # Only our programs get LD_LIBRARY_PATH (python3 and the tools keep the system's libraries).
    penv = dict(os.environ, LD_LIBRARY_PATH=libs)
    mpi = ["mpirun", "--bind-to", "none", "-np"]

    # The CUDA tests, as CMake listed them.
    with open(os.path.join(b, "device_manifest.json")) as f:
        manifest = json.load(f)
    for t in manifest["tests"]:
        name, out = t["step"], os.path.join(w, t["step"] + ".json")
        argv = mpi + [str(t["mpi_np"])] if t["mpi_np"] else []
        argv += [os.path.join(b, t["executable"])] + t["args"] + ["--gtest_output=json:" + out]
        rc, secs = check.step(name, t["timeout_s"], [argv], penv)
        figures = gtest_figures(out, check.log(name))
        status = status_of(rc)
        # Cases that need a GPU and skipped: the part did not pass on the GPU.
        if status == "passed" and figures["skipped"]:
            status = "passed, with skipped cases" if have_gpu else "skipped: no GPU (CPU cases passed)"
        check.part(name, status, secs, figures, check.log(name))

    # The harness steps. The device input's costs: the batched resize against one interpolate per
    # crop on the device, the GPU half's images/s and submit() time, the loader-side costs per core.
    out = os.path.join(w, "device_input_bench.json")
    rc, secs = check.step("device_input_bench", 90, [[
        b + "/bin/device_input_bench", "--quick", "--resize-batches", "64,128", "--resize-rounds", "3",
        "--resize-device", dev]], penv, stdout=out)
    check.part("device_input_bench", status_of(rc), secs, read_json(out), check.log("device_input_bench"))

    # Short training runs on a small set (4 images per class; 2 and one epoch without a GPU, where
    # it must fit on a loaded CPU): fp32, fp16 (loss scaling), bf16 twice (the same accuracies?
    # the same model bytes?). Without a GPU: fp32 on the CPU, the CUDA runs skipped.
    small = os.path.join(w, "small")
    per_class, epochs = (4, 2) if have_gpu else (2, 1)
    small_rc, secs = check.step("small_set", 120, [
        [b + "/bin/pets_synth", "--out", small + "/images", "--per-class", str(per_class), "--seed", "3"],
        mpi + ["2", b + "/bin/pets_preprocess", "--images", small + "/images", "--out", small + "/pets.h5"]],
        penv)
    check.part("small_set", status_of(small_rc), secs, {"images": per_class * 37}, check.log("small_set"))

    def train_run(name, *args, part=None, judge=lambda rc, figures: status_of(rc)):
        """pets_train on the small set at one rank: part `part` (default train_NAME), its status
        judge(rc, run_figures)."""
        part = part or "train_" + name
        if small_rc != 0:
            check.part(part, "skipped: no small set", 0, {})
            return
        run_dir = os.path.join(small, "run_" + name)
        rc, secs = check.step(part, 120, [mpi + [
            "1", b + "/bin/pets_train", "--data", small + "/pets.h5", "--epochs", str(epochs),
            "--batch-size", "16", "--eval-batch-size", "32", "--seed", "7", "--out", run_dir] + list(args)],
            penv)
        figures = run_figures(run_dir)
        check.part(part, judge(rc, figures), secs, figures, check.log(part))

    if have_gpu:
        train_run("fp32", "--device", "cuda")
        train_run("fp16", "--device", "cuda", "--mixed-precision", "fp16")
        train_run("bf16", "--device", "cuda", "--mixed-precision", "bf16")
        train_run("bf16_again", "--device", "cuda", "--mixed-precision", "bf16")
        same_acc, _, figures = same_runs(small + "/run_bf16", small + "/run_bf16_again")
        check.part("determinism", "passed" if same_acc else "failed: accuracies differ run to run", 0, figures)
        # --deterministic: the same model bit for bit.
        train_run("bf16_deterministic", "--device", "cuda", "--mixed-precision", "bf16", "--deterministic")
        train_run("bf16_deterministic_again", "--device", "cuda", "--mixed-precision", "bf16",
                  "--deterministic")
        _, bitwise, figures = same_runs(small + "/run_bf16_deterministic",
                                        small + "/run_bf16_deterministic_again")
        check.part("determinism_bitwise", "passed" if bitwise else "failed: the models differ run to run",
                   0, figures)
    else:
        train_run("fp32_cpu", "--device", "cpu")
        for n in ("fp32", "fp16", "bf16", "determinism", "determinism_bitwise"):
            check.part("train_" + n, "skipped: no GPU", 0, {})

    unfreeze_parts(check, b, py, penv, have_gpu, train_run, epochs)

    # The harness: roofline, model step (fp32/bf16/fp16), loader, end to end on 7,400 images.
    per_class = int(os.environ.get("PETS_DEVICE_PER_CLASS") or (200 if have_gpu else 4))
    batch = os.environ.get("PETS_DEVICE_BATCH") or "128"
    np_pre = min(max(cores // 2, 1), 8)
    big = os.path.join(w, "big")
    common = ["--train", b + "/bin/pets_train", "--preprocess", b + "/bin/pets_preprocess",
              "--synth", b + "/bin/pets_synth", "--mpi-preflags", "--bind-to none", "--np1-preflags", ""]
    big_rc, synth_s = check.step("harness_synth", 100, [[
        b + "/bin/pets_synth", "--out", big + "/images", "--per-class", str(per_class), "--seed", "1"]], penv)
    prep_s = 0
    if big_rc == 0:
        # pets_preprocess timed alone: the first half of the job a user waits for.
        big_rc, prep_s = check.step("harness_data", 120, [mpi + [
            str(np_pre), b + "/bin/pets_preprocess", "--images", big + "/images", "--out", big + "/pets.h5"]],
            penv)
    else:
        shutil.copy(check.log("harness_synth"), check.log("harness_data"))
    check.part("harness_data", status_of(big_rc), synth_s + prep_s,
               {"images": per_class * 37, "preprocess_np": np_pre, "synth_seconds": synth_s,
                "preprocess_seconds": prep_s}, check.log("harness_data"))
    if big_rc == 0:
        # The loader's scaling to every core a GPU's rank may own (CPU path and staging).
        sizes = (["--batch", batch, "--roof-batch", "64", "--min-seconds", "2", "--loader-epochs", "1",
                  "--loader-sweep", "1,2,4,8,%d" % cores] if have_gpu else
                 ["--batch", "8", "--image-size", "112", "--roof-batch", "2", "--roof-channels", "64",
                  "--min-seconds", "0.5", "--min-iters", "2", "--loader-epochs", "1"])
        out = os.path.join(w, "measure.json")
        rc, secs = check.step("harness_measure", 150, [[
            b + "/bin/pets_bench", "--device", dev, "--no-e2e", "--data", big + "/pets.h5", "--work",
            w + "/bench", "--report", out] + sizes + common], penv)
        check.part("harness_measure", status_of(rc), secs, read_json(out), check.log("harness_measure"))
        # Five epochs each (the whole job's training half is np1_bf16's wall time); the folded path
        # trains in np1_bf16_bn_eval.
        e2e = (["--e2e-runs", os.environ.get("PETS_DEVICE_E2E_RUNS") or E2E_RUNS, "--e2e-args",
                "--device cuda --seed 7", "--epochs", "5", "--train-batch", batch, "--eval-batch", "256"]
               if have_gpu else
               ["--e2e-runs", "np1", "--e2e-args", "--device cpu", "--epochs", "1", "--train-batch", "8",
                "--eval-batch", "16"])
        out = os.path.join(w, "e2e.json")
        rc, secs = check.step("harness_end_to_end", 220, [[
            b + "/bin/pets_bench", "--e2e-only", "--data", big + "/pets.h5", "--work", w + "/bench_e2e",
            "--report", out] + e2e + common], penv)
        status = status_of(rc)
        if not have_gpu and status == "passed":
            status = "passed on the CPU (no GPU: the GPU runs skipped)"
        check.part("harness_end_to_end", status, secs, read_json(out), check.log("harness_end_to_end"))
    else:
        check.part("harness_measure", "skipped: no data set", 0, {})
        check.part("harness_end_to_end", "skipped: no data set", 0, {})
    sweep_heads(check, big + "/pets.h5" if big_rc == 0 else None, b, libs, have_gpu)

    # The same job in Python with the node's own torch, timm and Accelerate: the tutorial's 5 epochs
    # on the same images, and the ceilings (its step and inference forward, eager and under
    # torch.compile). Without a GPU only the scripts themselves are checked, at tiny sizes.
    if big_rc != 0:
        check.part("tutorial_5_epochs", "skipped: no data set", 0, {})
    elif python_value(py, "import torchvision, PIL") is None:
        check.part("tutorial_5_epochs", "skipped: %s has no torchvision or PIL" % py, 0, {})
    else:
        out = os.path.join(w, "tutorial.json")
        tut = ["--images", big + "/images", "--report", out]
        if not have_gpu:
            tut += ["--epochs", "1", "--batch-size", "4", "--workers", "1", "--image-size", "64",
                    "--mixed-precision", "bf16"]
        rc, secs = check.step("tutorial_5_epochs", 150, [[py, HERE + "/tutorial_run.py"] + tut])
        check.part("tutorial_5_epochs", status_of(rc), secs, read_json(out), check.log("tutorial_5_epochs"))
    sizes = ["--device", "cuda", "--batch", batch, "--eval-batch", "256"] if have_gpu else ["--device", "cpu",
                                                                                         "--smoke"]
    # Where the eager step's GPU time goes (the kernels pets_train runs too).
    out = os.path.join(w, "step_profile.json")
    rc, secs = check.step("step_profile", 90, [[py, HERE + "/step_profile.py", "--report", out] + sizes])
    check.part("step_profile", status_of(rc), secs, read_json(out), check.log("step_profile"))
    out = os.path.join(w, "ceilings.json")
    rc, secs = check.step("torch_ceilings", 240, [[py, HERE + "/torch_ceilings.py", "--report", out,
                                                   "--budget-s", str(check.left() - 20)] + sizes])
    check.part("torch_ceilings", status_of(rc), secs, read_json(out), check.log("torch_ceilings"))


def unfreeze_parts(check, b, py, penv, have_gpu, train_run, epochs):
    """A trained backbone in bf16 (--unfreeze layer4 and all): for each, pets_train's step
    (`pets_bench --step-only bf16.U`, part unfreeze_step_U) and PyTorch's eager step for the same
    model with the node's torch (bench/python_step.py, part unfreeze_step_U_pytorch), one process
    each, at 224 px and batch 64 on a GPU: images/s and peak memory (device_report.py's targets
    divide ours by PyTorch's); then a whole `pets_train --unfreeze layer4` run on the small set
    (part unfreeze_train_layer4: it must exit 0 with an accuracy for every epoch). About 40 s on a
    GPU. Without one, the same on the CPU at tiny sizes (batch 2, 64 px, one step; the training
    run at 64 px), which checks the commands only."""
    dev = "cuda" if have_gpu else "cpu"
    # (batch, image side, warm-up steps, timed steps)
    batch, size, warmup, steps = (64, 224, 5, 30) if have_gpu else (2, 64, 0, 1)
    passed = "passed" if have_gpu else "passed on the CPU (no GPU: tiny sizes)"

    def status(rc, ok, why):
        s = status_of(rc)
        return (passed if ok else "failed: " + why) if s == "passed" else s

    for unfreeze in ("layer4", "all"):
        name = "unfreeze_step_" + unfreeze
        out = os.path.join(check.work, name + ".json")
        rc, secs = check.step(name, 45, [[
            b + "/bin/pets_bench", "--step-only", "bf16." + unfreeze, "--device", dev, "--batch",
            str(batch), "--image-size", str(size), "--warmup", str(warmup), "--min-iters", str(steps),
            "--min-seconds", "0", "--report", out]], penv)
        figures = read_json(out)
        check.part(name, status(rc, get(figures, "step_only", "images_per_s"), "no images/s reported"),
                   secs, figures, check.log(name))
        name += "_pytorch"
        out = os.path.join(check.work, name + ".json")
        rc, secs = check.step(name, 45, [[
            py, HERE + "/python_step.py", "--device", dev, "--unfreeze", unfreeze, "--precision", "bf16",
            "--batch", str(batch), "--image-size", str(size), "--warmup", str(warmup), "--steps",
            str(steps)]], stdout=out)
        figures = read_json(out)
        check.part(name, status(rc, get(figures, "images_per_s"), "no images/s reported"), secs, figures,
                   check.log(name))

    def trained(rc, figures):
        # metrics.jsonl's accuracy of each epoch: a fraction of the evaluation images.
        measured = sum(isinstance(a, (int, float)) and 0 <= a <= 1 for a in figures["accuracy"])
        return status(rc, measured == epochs == figures["epochs"],
                      "%d of %d epochs with an accuracy in metrics.jsonl" % (measured, epochs))

    args = ["--device", dev, "--mixed-precision", "bf16", "--unfreeze", "layer4"]
    if not have_gpu:
        args += ["--image-size", "64"]
    train_run("unfreeze_layer4", *args, part="unfreeze_train_layer4", judge=trained)


def sweep_heads(check, store, b, libs, have_gpu):
    """What a --max-lr sweep costs: whole `pets_train` runs of the 8 heads of SWEEP and of the
    single head, the same images and options otherwise, in pairs that alternate which goes first
    (PETS_DEVICE_SWEEP_PAIRS, 3 on a GPU: 2 epochs of the 7,400 images each, about 6 s a run;
    1 pair of one epoch at 64 px on the CPU), within 60 s: a run that would end after that is
    not started. Figures: bench/sweep_report.py's (per pair the wall, training and CPU ratios;
    their medians; bytes_per_step of each side; the checks of the sweep's outputs)."""
    name = "sweep_heads"
    if store is None:
        check.part(name, "skipped: no data set", 0, {})
        return
    sweep = os.environ.get("PETS_DEVICE_SWEEP") or SWEEP
    pairs = int(os.environ.get("PETS_DEVICE_SWEEP_PAIRS") or (3 if have_gpu else 1))
    args = (["--device", "cuda", "--mixed-precision", "bf16", "--epochs", "2", "--batch-size", "128",
             "--eval-batch-size", "256"] if have_gpu else
            ["--device", "cpu", "--epochs", "1", "--image-size", "64", "--batch-size", "8",
             "--eval-batch-size", "16"])
    args += ["--seed", "7", "--progress", "none"]
    work = os.path.join(check.work, "sweep")
    facts = os.path.join(work, "facts.jsonl")
    os.makedirs(work, exist_ok=True)
    limit = 60
    deadline = time.time() + min(limit, check.left()) - 3
    commands = []
    for pair in range(1, pairs + 1):
        for side in (("single", "sweep") if pair % 2 else ("sweep", "single")):
            lr = sweep if side == "sweep" else SWEEP_SINGLE
            run = os.path.join(work, "%s-%d" % (side, pair))
            # The timer is python3 with the system's libraries; only pets_train's mpirun gets the
            # bundle's (LD_LIBRARY_PATH through env).
            commands.append([sys.executable, HERE + "/sweep_report.py", "time", "--facts", facts,
                             "--label", side, "--pair", str(pair), "--max-lr", lr, "--run", run,
                             "--log", run + ".log", "--drop-models", "--deadline", "%.0f" % deadline,
                             "--", "env", "LD_LIBRARY_PATH=" + libs,
                             "mpirun", "--bind-to", "none", "-np", "1", b + "/bin/pets_train",
                             "--data", store, "--out", run, "--max-lr", lr] + args)
    rc, secs = check.step(name, limit, commands, dict(os.environ))
    figures = {"settings": {"pairs": pairs, "ranks": 1, "args": " ".join(args), "store": store}}
    try:
        with open(facts) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        result = sweep_summary(lines, [float(v) for v in sweep.split(",")], [float(SWEEP_SINGLE)], classes=37)
        figures.update(result)
        with open(check.log(name), "a") as log:
            log.write("\n".join(result["problems"]) + "\n")
    except (OSError, ValueError) as e:
        figures["facts"] = "unreadable: %s" % e
        result = None
    status = status_of(rc)
    if status == "passed":
        if result is None or not result["summary"]["pairs"]:
            status = "failed: no pair of runs finished within %d s" % limit
        elif result["failed"]:
            status = "failed: the sweep run did not report its %d heads" % len(sweep.split(","))
        elif result["problems"]:
            status = "passed, with problems in the sweep's outputs (figures: problems)"
        elif not have_gpu:
            status = "passed on the CPU (no GPU: the GPU runs skipped)"
    check.part(name, status, secs, figures, check.log(name))


def main():
    dev_dir = os.environ.get("PETS_DEVICE_DIR") or os.path.join(ROOT, ".device")
    bundle = os.path.join(dev_dir, "pets_device.tar.xz")
    if not os.path.isfile(bundle):
        die("no bundle at %s: run 'bench/device_check.sh prepare' on the build machine first (and copy "
            ".device/ with the checkout)" % bundle)
    out_dir = os.environ.get("OUT")
    if not out_dir:
        die("OUT is not set: the folder for the report, e.g. OUT=$PWD/out", 2)
    py = os.environ.get("PETS_DEVICE_PYTHON") or sys.executable
    if not shutil.which(py):
        die("no %s (the python3 with torch)" % py)
    try:
        budget = int(os.environ.get("PETS_DEVICE_BUDGET_S") or 460)
    except ValueError:
        die("PETS_DEVICE_BUDGET_S is not a number of seconds", 2)
    os.makedirs(out_dir, exist_ok=True)
    work = os.environ.get("PETS_DEVICE_WORK") or "/tmp/pets_device"
    shutil.rmtree(work, ignore_errors=True)
    selected = {s for s in (os.environ.get("PETS_DEVICE_STEPS") or "").split(",") if s}
    check = Check(work, budget, selected)
    status = 1
    try:
        run_checks(check, bundle, py)
        status = 0
    finally:
        # The one JSON report (bench/device_report.py), whatever happened, and the logs.
        subprocess.run([sys.executable, HERE + "/device_report.py", work + "/parts",
                        out_dir + "/device_check.json", str(int(time.monotonic() - check.t0)), str(status)])
        with tarfile.open(os.path.join(out_dir, "device_logs.tar.gz"), "w:gz") as t:
            t.add(work + "/logs", arcname="logs")
    failed = []
    for p in sorted(glob.glob(work + "/parts/*.json")):
        with open(p) as f:
            part = json.load(f)
        if part["status"].startswith("failed"):
            failed.append(part["name"])
    if failed:
        print("device_check: some parts failed (see %s/device_check.json): %s" % (out_dir, ", ".join(failed)),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
