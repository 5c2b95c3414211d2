"""The device check's machinery, for bench/device_check.py: its steps, each run under its own time
limit within the budget, the parts they report (one JSON file each, which bench/device_report.py
reads), the figures read from the steps' outputs, and the bundle's unpacking and library check.
Python 3.8 or newer, standard library only.
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time

GLIBC = re.compile(r"^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|"
                   r"librt\.so\.1|ld-linux-x86-64\.so\.2|libutil\.so\.1|libresolv\.so\.2|libanl\.so\.1)$")
TIMED_OUT, OUT_OF_TIME, NOT_SELECTED = 124, 125, 126


def die(message, status=1):
    print("device_check: error: " + message, file=sys.stderr)
    sys.exit(status)


def status_of(rc):
    return {0: "passed", 124: "failed: timed out", 137: "failed: timed out",
            OUT_OF_TIME: "skipped: out of time",
            NOT_SELECTED: "skipped: not selected"}.get(rc, "failed: status %d" % rc)


def read_json(path):
    """A step's JSON output as figures: {} when absent or empty, the text when not JSON."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return {"unparsed": text}


class Check:
    def __init__(self, work, budget, selected):
        self.work, self.budget, self.selected = work, budget, selected
        self.t0 = time.monotonic()
        self.parts = 0
        os.makedirs(os.path.join(work, "parts"))
        os.makedirs(os.path.join(work, "logs"))

    def log(self, name):
        return os.path.join(self.work, "logs", name + ".log")

    def left(self):
        return int(self.budget - (time.monotonic() - self.t0))

    def part(self, name, status, seconds, figures, log=None):
        tail = ""
        if log:
            try:
                with open(log, errors="replace") as f:
                    tail = f.read()[-3000:]
            except OSError as e:
                tail = "(no log: %s)" % e
        path = os.path.join(self.work, "parts", "%02d_%s.json" % (self.parts, name))
        with open(path, "w") as f:
            json.dump({"name": name, "status": status, "seconds": round(float(seconds), 1),
                       "figures": figures, "log_tail": tail}, f, indent=1)
        self.parts += 1
        print("device_check: [%s] %s (%d s)" % (status, name, seconds), file=sys.stderr)

    def step(self, name, max_s, commands, env=None, stdout=None):
        """Runs the commands one after the other (the next only when one succeeds) with their
        output in the step's log, all within max_s or what is left of the budget; on timeout the
        process group gets SIGTERM, then SIGKILL 10 s later. Returns (status, seconds)."""
        log = self.log(name)
        if self.selected and name not in self.selected:
            with open(log, "w") as f:
                f.write("not among PETS_DEVICE_STEPS (%s)\n" % ",".join(sorted(self.selected)))
            return NOT_SELECTED, 0
        limit = min(self.left(), max_s)
        if limit < 10:
            with open(log, "w") as f:
                f.write("out of time before %s\n" % name)
            return OUT_OF_TIME, 0
        print("device_check: %s (at most %d s)" % (name, limit), file=sys.stderr)
        start = time.monotonic()
        rc = 0
        with open(log, "w") as f:
            for argv in commands:
                out = open(stdout, "w") if stdout else f
                try:
                    rc = run_limited(argv, env, out, f, limit - (time.monotonic() - start))
                finally:
                    if stdout:
                        out.close()
                if rc == TIMED_OUT:
                    f.write("device_check: TIMED OUT after %d s\n" % limit)
                if rc != 0:
                    break
        return rc, int(time.monotonic() - start)


def run_limited(argv, env, out, err, limit):
    try:
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                             start_new_session=True)
    except OSError as e:
        err.write("device_check: cannot run %s: %s\n" % (argv[0], e))
        err.flush()
        return 127
    try:
        rc = p.wait(timeout=max(limit, 0))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        return TIMED_OUT
    return 128 - rc if rc < 0 else rc


def gtest_figures(json_path, log):
    out = {"passed": [], "failed": [], "skipped": []}
    try:
        with open(json_path) as f:
            report = json.load(f)
        for suite in report.get("testsuites", []):
            for t in suite.get("testsuite", []):
                name = suite["name"] + "." + t["name"]
                if t.get("failures"):
                    out["failed"].append(name)
                elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                    out["skipped"].append(name)
                else:
                    out["passed"].append(name)
    except (OSError, ValueError):
        out["report"] = "no GoogleTest JSON"
    # The parity test's measured errors.
    with open(log, errors="replace") as f:
        out["parity"] = [l.split("]", 1)[1].strip() for l in f if l.startswith("[ parity  ]")]
    return out


def run_figures(run_dir):
    """The figures of one pets_train run folder (metrics.jsonl)."""
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            epochs = [json.loads(l) for l in f if l.strip()]
    except OSError:
        epochs = []
    return {"epochs": len(epochs), "accuracy": [e.get("accuracy") for e in epochs],
            "train_images_per_s": [e.get("train_images_per_s") for e in epochs],
            "loader_wait_share": [e.get("loader_wait_share") for e in epochs],
            "upload_share": [e.get("upload_share") for e in epochs]}


def same_runs(a, b):
    """Two runs' accuracies equal? The tensors of their model and checkpoint files bitwise equal
    (the metadata left out: a checkpoint's records its timings)? -> (same_acc, bitwise, figures)"""
    def accuracies(d):
        try:
            with open(os.path.join(d, "metrics.jsonl")) as f:
                return [json.loads(l).get("accuracy") for l in f if l.strip()]
        except OSError:
            return None

    def models(d):
        return sorted(os.path.relpath(p, d) for p in glob.glob(d + "/**/*.safetensors", recursive=True))

    def tensors(path):
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
            data = f.read()
        return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
                for k, v in header.items() if k != "__metadata__"}

    def differing(name):
        ta, tb = tensors(os.path.join(a, name)), tensors(os.path.join(b, name))
        return sorted(k for k in set(ta) | set(tb) if ta.get(k) != tb.get(k))

    acc_a, acc_b = accuracies(a), accuracies(b)
    same_acc = acc_a is not None and acc_a == acc_b
    files = models(a)
    diffs = {f: differing(f) for f in files if os.path.exists(os.path.join(b, f))}
    bitwise = bool(files) and files == models(b) and not any(diffs.values())
    return same_acc, bitwise, {
        "accuracy_a": acc_a, "accuracy_b": acc_b, "same_accuracies": same_acc, "models_compared": files,
        "bitwise_same_models": bitwise,
        "differing_tensors": {f: d[:12] + (["..."] if len(d) > 12 else []) for f, d in diffs.items() if d}}


def python_value(py, code):
    r = subprocess.run([py, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       universal_newlines=True)
    return r.stdout.strip() if r.returncode == 0 else None


def unpack(bundle, dest):
    os.makedirs(dest)
    if shutil.which("xz"):
        xz = subprocess.Popen(["xz", "-dc", bundle], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-C", dest, "-xf", "-"], stdin=xz.stdout, check=True)
        if xz.wait() != 0:
            die("xz could not read " + bundle)
    else:  # no xz there: python's lzma
        with tarfile.open(bundle, "r:xz") as t:
            t.extractall(dest)


def check_libraries(check, b, site, libs, bundle):
    """ldd on every program and component: each library inside the bundle, torch's site-packages
    or glibc's own. ldd itself fails (and lists nothing) when a library it finds cannot be loaded."""
    start = time.monotonic()
    problems = []
    files = glob.glob(b + "/bin/*") + glob.glob(b + "/lib/openmpi/*.so") + glob.glob(b + "/lib/pmix/*.so")
    env = dict(os.environ, LD_LIBRARY_PATH=libs)
    for f in sorted(files):
        if os.path.islink(f):
            continue
        rel = os.path.relpath(f, b)
        r = subprocess.run(["ldd", f], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
        lines = r.stdout.splitlines()
        if r.returncode != 0:
            problems.append("%s: ldd failed: %s" % (rel, " ".join([l for l in lines if "=>" not in l][:2])))
        for line in lines:
            w = line.split()
            if len(w) >= 3 and w[1] == "=>":
                if w[2] == "not" or not (w[2].startswith(b + "/") or w[2].startswith(site + "/")
                                         or GLIBC.match(w[0])):
                    problems.append("%s: %s => %s" % (rel, w[0], w[2]))
    log = check.log("libraries")
    with open(log, "w") as f:
        f.write("\n".join(problems) + "\n")
        with open(os.path.join(b, "MANIFEST")) as m:
            f.write(m.read())
        f.write("torch: %s/torch\nLD_LIBRARY_PATH=%s\n" % (site, libs))
    seconds = time.monotonic() - start
    if problems:
        check.part("libraries", "failed: unresolved or outside the bundle and torch", seconds,
                   {"problems": problems}, log)
    else:
        check.part("libraries", "passed", seconds,
                   {"bundle_bytes": os.path.getsize(bundle), "torch_dir": site + "/torch"}, log)
