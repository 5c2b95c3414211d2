"""Checks of a --max-lr sweep against runs of its heads alone (tests/train/test_sweep.sh).

usage:
  sweep_check.py same SWEEP_DIR SINGLE_DIR... : head k of the sweep in SWEEP_DIR trained exactly
      as the run in the k-th SINGLE_DIR: every epoch's loss, lr, accuracy and per-class counts in
      metrics.jsonl, and the head's weights and Adam moments in the last checkpoint, bit for bit;
      the sweep's epoch lines report the epoch's best head (the first of equals), and its
      model.safetensors is the final epoch's best head, bit for bit its run's model, with the
      sweep in its metadata; with --keep-best, best.safetensors is the best (head, epoch): its
      head is that epoch's head in the sweep's checkpoint of that epoch's end.
  sweep_check.py confusion RUN_DIR : confusion.json agrees with the final epoch of metrics.jsonl
      (per head: diagonal = correct per class, rows = evaluated per class).
Reads safetensors itself (8-byte header length, JSON header, raw data): no torch needed.
"""
import json
import struct
import sys


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors = {name: (h["dtype"], tuple(h["shape"]), body[h["data_offsets"][0]:h["data_offsets"][1]])
               for name, h in header.items()}
    return meta, tensors


def latest_checkpoint(run):
    with open(f"{run}/latest") as f:
        return read_safetensors(f"{run}/{f.read().strip()}")


def metrics(run):
    with open(f"{run}/metrics.jsonl") as f:
        return [json.loads(line) for line in f]


failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)


def same(sweep, singles):
    epochs = metrics(sweep)
    _, ckpt = latest_checkpoint(sweep)
    keys = ("train_loss", "lr", "accuracy", "correct", "evaluated", "class_correct", "class_evaluated")
    for k, single in enumerate(singles):
        alone = metrics(single)
        expect(len(alone) == len(epochs), f"head {k}: {len(epochs)} epochs, its run {len(alone)}")
        for e, (m, a) in enumerate(zip(epochs, alone)):
            head = m["heads"][k]
            for key in keys:
                expect(head[key] == a[key], f"epoch {e} head {k} {key}: {head[key]} != {a[key]} alone")
        _, own = latest_checkpoint(single)
        names = {"weight": "model.fc.weight" if k == 0 else f"model.heads.{k}.weight",
                 "bias": "model.fc.bias" if k == 0 else f"model.heads.{k}.bias"}
        for p, name in names.items():
            expect(name in ckpt and ckpt[name] == own[f"model.fc.{p}"],
                   f"head {k} {p}: not bitwise its run's in the last checkpoint")
        for i, p in enumerate(("weight", "bias")):
            for moment in ("exp_avg", "exp_avg_sq"):
                mine = ckpt.get(f"adam.{moment}.{2 * k + i}")
                expect(mine == own[f"adam.{moment}.{i}"], f"head {k} {p}: Adam {moment} differs")
    for e, m in enumerate(epochs):
        best = max(range(len(m["heads"])), key=lambda k: (m["heads"][k]["accuracy"], -k))
        expect(m["head"] == best, f"epoch {e}: reports head {m['head']}, the best is {best}")
        expect(m["accuracy"] == m["heads"][best]["accuracy"], f"epoch {e}: accuracy not the best head's")
    chosen = epochs[-1]["head"]
    meta, model = read_safetensors(f"{sweep}/model.safetensors")
    _, alone = read_safetensors(f"{singles[chosen]}/model.safetensors")
    expect(model == alone, f"model.safetensors is not bitwise head {chosen}'s run's model")
    expect(meta.get("head") == str(chosen), f"model metadata head {meta.get('head')}, chosen {chosen}")
    sweep_lrs = [h["max_lr"] for h in epochs[-1]["heads"]]
    expect(json.loads(meta.get("sweep_max_lr", "null")) == sweep_lrs, "model metadata sweep_max_lr")
    expect(json.loads(meta.get("max_lr", "null")) == sweep_lrs[chosen], "model metadata max_lr")
    keep_best(sweep, epochs)


def keep_best(sweep, epochs):
    best = max(range(len(epochs)), key=lambda e: (epochs[e]["accuracy"], -e))
    head = epochs[best]["head"]
    meta, model = read_safetensors(f"{sweep}/best.safetensors")
    expect(meta.get("epoch") == str(best) and meta.get("head") == str(head),
           f"best.safetensors is epoch {meta.get('epoch')} head {meta.get('head')}, "
           f"the best is epoch {best} head {head}")
    import glob
    for path in glob.glob(f"{sweep}/ckpt-*.safetensors"):
        state_meta, ckpt = read_safetensors(path)
        state = json.loads(state_meta["pets_state"])
        if state["epoch"] == best + 1 and state["position"]["step"] == 0:
            for p in ("weight", "bias"):
                name = f"model.fc.{p}" if head == 0 else f"model.heads.{head}.{p}"
                expect(model[f"fc.{p}"] == ckpt[name], f"best.safetensors fc.{p} is not head {head}'s")
            return
    failures.append(f"no checkpoint of the end of epoch {best}")


def confusion(run):
    with open(f"{run}/confusion.json") as f:
        c = json.load(f)
    last = metrics(run)[-1]
    heads = last.get("heads", [last])
    expect(c["epoch"] == last["epoch"], "confusion.json is not the final epoch's")
    expect(c["chosen"] == last.get("head", 0), "confusion.json's chosen head")
    expect(len(c["heads"]) == len(heads), "confusion.json: not one matrix per head")
    n = len(c["labels"])
    for k, (h, m) in enumerate(zip(c["heads"], heads)):
        matrix = h["matrix"]
        expect(len(matrix) == n and all(len(r) == n for r in matrix), f"head {k}: matrix not {n}x{n}")
        expect([matrix[i][i] for i in range(n)] == m["class_correct"], f"head {k}: diagonal != class_correct")
        expect([sum(r) for r in matrix] == m["class_evaluated"], f"head {k}: rows != class_evaluated")
        expect(sum(map(sum, matrix)) == m["evaluated"], f"head {k}: matrix total != evaluated")
        expect(h["accuracy"] == m["accuracy"], f"head {k}: accuracy differs from metrics.jsonl")
        names = list(m.get("class_accuracy", last["class_accuracy"]).keys()) if "class_accuracy" in m else None
        if names is not None:
            expect(sorted(names) == sorted(c["labels"]), f"head {k}: class_accuracy names")


if __name__ == "__main__":
    if sys.argv[1] == "same":
        same(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "confusion":
        confusion(sys.argv[2])
    else:
        sys.exit(f"unknown check {sys.argv[1]}")
    for f in failures:
        print("sweep_check:", f, file=sys.stderr)
    sys.exit(1 if failures else 0)
