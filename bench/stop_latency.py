#!/usr/bin/env python3
"""How long a stop takes: signal -> stop checkpoint on disk, -> stop line, -> launcher exit.

    bench/stop_latency.py [--tries N] [--batch-size B] [--pause S] [--mpi-preflags "--oversubscribe"]
                          [--work DIR] [--train-args "--unfreeze layer4"]

`mpirun -np 2 pets_train` (Open MPI's default settings) over a synthetic store (3 classes x 30
images); rank 0 spends --pause (10) s more in global step 23 (PETS_PAUSE_STEP: a step in flight far longer
than mpirun's kill timeout), and the signal is sent once it says so. The stop must write the
checkpoint of step 23 (the last completed) without waiting for that step. Three ways in:

  sigint_mpirun   Ctrl-C to mpirun: it sends the ranks SIGTERM after its kill timeout (1 s) and
                  SIGKILL 1 s later
  sigterm_ranks   SIGTERM to both ranks at once, as Slurm sends it (they exit after the step in
                  flight, i.e. after the pause)
  sigusr1_mpirun  SIGUSR1 to mpirun, which forwards it to every rank at once (the same)

"on disk" is when `latest` names ckpt-23.safetensors (written after the checkpoint's rename),
polled every millisecond. Prints one JSON object per try and a Markdown table of medians and
ranges. PETS_BUILD selects the build folder (default build/).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def children(pid):
    """The pids whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(entry))
            except OSError:
                pass
    return out


def wait_for(predicate, seconds, step=0.001):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return None


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def one_try(args, build, work, way, index):
    out = os.path.join(work, f"{way}-{index}")
    err_path = out + ".err"
    subprocess.run(["rm", "-rf", out], check=True)
    env = dict(os.environ, PETS_PAUSE_STEP=f"23:{args.pause}")
    cmd = (["mpirun", "-np", "2"] + args.mpi_preflags.split() + ["-x", "PETS_PAUSE_STEP",
           os.path.join(build, "pets_train"), "--data", os.path.join(work, "pets.h5"),
           "--batch-size", str(args.batch_size), "--eval-batch-size", "8", "--epochs", "30",
           "--seed", "42", "--out", out] + args.train_args.split())
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                start_new_session=True)
    if not wait_for(lambda: "pausing in step 23 " in read(err_path) or proc.poll() is not None,
                    600, 0.05) or proc.poll() is not None:
        sys.exit(f"stop_latency.py: {way}: rank 0 never reached step 23; see {err_path}")
    latest = os.path.join(out, "latest")
    ranks = children(proc.pid)
    start = time.monotonic()
    if way == "sigint_mpirun":
        proc.send_signal(signal.SIGINT)
    elif way == "sigusr1_mpirun":
        proc.send_signal(signal.SIGUSR1)
    else:
        for pid in ranks:
            os.kill(pid, signal.SIGTERM)
    on_disk = wait_for(lambda: read(latest).strip() == "ckpt-23.safetensors", 30)
    t_disk = time.monotonic() - start if on_disk else None
    t_line = wait_for(lambda: "\nstopped by" in read(err_path), 30)
    t_line = time.monotonic() - start if t_line else None
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    t_exit = time.monotonic() - start
    return {"way": way, "try": index, "ranks": len(ranks),
            "signal_to_checkpoint_s": t_disk, "signal_to_line_s": t_line,
            "signal_to_exit_s": round(t_exit, 4), "launcher_status": proc.returncode}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tries", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--mpi-preflags", default="--oversubscribe")
    p.add_argument("--pause", type=float, default=10.0,
                   help="seconds rank 0 spends more in step 23 (> mpirun's 2 s to a kill)")
    p.add_argument("--work", default=None)
    p.add_argument("--train-args", default="",
                   help="more pets_train options (--unfreeze layer4: a 180 MB checkpoint)")
    args = p.parse_args()
    build = os.environ.get("PETS_BUILD", os.path.join(HERE, "..", "build"))
    work = args.work or os.path.join(build, "bench-stop")
    os.makedirs(work, exist_ok=True)
    store = os.path.join(work, "pets.h5")
    if not os.path.exists(store):
        subprocess.run([os.path.join(build, "pets_synth"), "--out", os.path.join(work, "images"),
                        "--classes", "3", "--per-class", "30", "--seed", "7"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["mpirun", "-np", "2"] + args.mpi_preflags.split() +
                       [os.path.join(build, "pets_preprocess"), "--images",
                        os.path.join(work, "images"), "--out", store], check=True,
                       stdout=subprocess.DEVNULL)
    rows = []
    for way in ("sigint_mpirun", "sigterm_ranks", "sigusr1_mpirun"):
        for i in range(args.tries):
            r = one_try(args, build, work, way, i)
            print(json.dumps(r), flush=True)
            rows.append(r)
    print("\n| way in | signal → checkpoint on disk | signal → stop line | signal → launcher exit "
          "| launcher status |\n| --- | --- | --- | --- | --- |")

    def spread(values):
        values = [v for v in values if v is not None]
        if not values:
            return "none"
        return (f"{statistics.median(values):.3f} s ({min(values):.3f}–{max(values):.3f})")

    for way in ("sigint_mpirun", "sigterm_ranks", "sigusr1_mpirun"):
        mine = [r for r in rows if r["way"] == way]
        print(f"| {way} | {spread([r['signal_to_checkpoint_s'] for r in mine])} "
              f"| {spread([r['signal_to_line_s'] for r in mine])} "
              f"| {spread([r['signal_to_exit_s'] for r in mine])} "
              f"| {sorted({r['launcher_status'] for r in mine})} |")


if __name__ == "__main__":
    main()
