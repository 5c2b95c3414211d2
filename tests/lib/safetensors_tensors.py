#!/usr/bin/env python3
"""The tensors of safetensors files, for the script tests (Python's standard library only).

  safetensors_tensors.py list FILE             "name count" a line, sorted by name
  safetensors_tensors.py same A B PREFIX...    exit 0 when the tensors of A whose names start with a
                                               PREFIX (at least one) are byte for byte B's, else 1
  safetensors_tensors.py differing A B PREFIX  "N M": of the M parameters of A whose names start
                                               with PREFIX (BatchNorm statistics left out), N
                                               differ from B's
"""
import json
import math
import struct
import sys

STATISTICS = ("running_mean", "running_var", "num_batches_tracked")


def header(path):
    with open(path, "rb") as f:
        return json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))


def tensor_bytes(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        entries = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]]
            for k, v in entries.items() if k != "__metadata__"}


def main(command, *args):
    if command == "list":
        entries = header(args[0])
        for name in sorted(k for k in entries if k != "__metadata__"):
            print(name, math.prod(entries[name]["shape"]))
        return 0
    a, b = tensor_bytes(args[0]), tensor_bytes(args[1])
    if command == "same":
        names = [k for k in a if k.startswith(tuple(args[2:]))]
        return 0 if names and all(a[k] == b.get(k) for k in names) else 1
    if command == "differing":
        names = [k for k in a if k.startswith(args[2]) and not k.endswith(STATISTICS)]
        print(sum(a[k] != b.get(k) for k in names), len(names))
        return 0
    print("safetensors_tensors.py: unknown command " + command, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
