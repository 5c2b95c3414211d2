#!/usr/bin/env python3
"""scripts/plot_curves.py on small metrics.jsonl files: a run's and a sweep's each give an 800 x 320
PNG (by default beside the file, or at --out); a file without epochs, or with a line that is not
JSON, is one `error:` line, exit 2 and no picture. Skipped (77) without matplotlib.

Arguments: SCRIPT (scripts/plot_curves.py)
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

SCRIPT = sys.argv[1]
failures = []


def python_with_matplotlib():
    # install_deps.sh installs Debian's python3-matplotlib, for the system's python3.
    for python in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(python) and subprocess.run(
                [python, "-c", "import matplotlib"], capture_output=True).returncode == 0:
            return python
    return None


def check(what, ok, detail=""):
    print(("PASS: " if ok else "FAIL: ") + what + ("" if ok else f" ({detail})"))
    if not ok:
        failures.append(what)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def epoch_line(epoch, loss, accuracy, heads=None):
    row = {"epoch": epoch, "accuracy": accuracy, "correct": 1, "evaluated": 2,
           "train_loss": loss, "lr": 1e-3}
    if heads is not None:
        row["head"] = 0
        row["heads"] = heads
    return json.dumps(row)


python = python_with_matplotlib()
if python is None:
    print("SKIPPED: no python3 with matplotlib (scripts/install_deps.sh installs it)")
    sys.exit(77)

with tempfile.TemporaryDirectory() as work:
    env = dict(os.environ, MPLCONFIGDIR=os.path.join(work, "mpl"), MPLBACKEND="Agg")

    def plot(*args):
        return subprocess.run([python, SCRIPT, *args], capture_output=True, text=True, env=env)

    run = os.path.join(work, "run")
    os.mkdir(run)
    with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        # Out of order: the script sorts by epoch.
        for epoch, loss, acc in [(1, 2.1, 30.0), (0, 3.6, 7.4), (2, 1.2, 55.5)]:
            f.write(epoch_line(epoch, loss, acc) + "\n")
    r = plot(run)
    default_png = os.path.join(run, "training_curves.png")
    check("a run folder: exit 0", r.returncode == 0, r.stderr)
    check("a run folder: an 800 x 320 PNG beside metrics.jsonl",
          os.path.exists(default_png) and png_size(default_png) == (800, 320),
          png_size(default_png) if os.path.exists(default_png) else "no file")
    check("a run folder: says what it wrote", "wrote " + default_png + " (3 epochs)" in r.stdout,
          r.stdout)

    sweep = os.path.join(work, "sweep.jsonl")
    with open(sweep, "w") as f:
        for epoch in range(2):
            heads = [{"max_lr": lr, "lr": lr, "train_loss": 3.0 - epoch - k, "accuracy": 10.0 * (k + epoch),
                      "correct": 1, "evaluated": 2} for k, lr in enumerate([1e-3, 3e-3, 1e-2])]
            f.write(epoch_line(epoch, 2.0, 20.0, heads) + "\n")
    out = os.path.join(work, "sweep.png")
    r = plot(sweep, "--out", out, "--title", "a sweep")
    check("a sweep: exit 0", r.returncode == 0, r.stderr)
    check("a sweep: an 800 x 320 PNG at --out",
          os.path.exists(out) and png_size(out) == (800, 320), "no file or another size")

    for name, text in [("empty.jsonl", "\n"), ("broken.jsonl", epoch_line(0, 1.0, 5.0) + "\n{oops\n"),
                       ("missing.jsonl", None)]:
        path = os.path.join(work, name)
        if text is not None:
            with open(path, "w") as f:
                f.write(text)
        out = os.path.join(work, name + ".png")
        r = plot(path, "--out", out)
        check(f"{name}: exit 2, one error line, no picture",
              r.returncode == 2 and r.stderr.startswith("error: ") and
              len(r.stderr.strip().splitlines()) == 1 and not os.path.exists(out),
              f"status {r.returncode}, stderr {r.stderr!r}")

sys.exit(1 if failures else 0)
