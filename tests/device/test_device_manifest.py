#!/usr/bin/env python3
"""device_manifest.json against ctest: every test labelled `cuda` runs an executable that the
manifest has a step for (so the device check runs every CUDA test, and a new one cannot be left
out: tests/CMakeLists.txt's pets_device_step adds it), and every step's executable is among those
tests. Also the manifest's own form: unique step names, positive time limits within the device
check's budget, executables under bin/.

usage: test_device_manifest.py CTEST BUILD_DIR
Exit 77 (skipped) when a step's test executable is not built (its cases are then not listed)."""
import json
import os
import subprocess
import sys

ctest, build = sys.argv[1:3]
with open(os.path.join(build, "device_manifest.json")) as f:
    manifest = json.load(f)
listing = json.loads(subprocess.run([ctest, "--show-only=json-v1", "-L", "^cuda$"], cwd=build, check=True,
                                    stdout=subprocess.PIPE, universal_newlines=True).stdout)
failures = []

steps = manifest["tests"]
names = [s["step"] for s in steps]
if len(set(names)) != len(names):
    failures.append("step names repeated: %s" % names)
for s in steps:
    if not s["executable"].startswith("bin/") or not 0 < s["timeout_s"] <= 460:
        failures.append("step %s: executable %s, timeout_s %s" % (s["step"], s["executable"], s["timeout_s"]))
    if "cuda" not in s["labels"]:
        failures.append("step %s: labels %s lack cuda" % (s["step"], s["labels"]))
by_exe = {os.path.basename(s["executable"]): s["step"] for s in steps}

seen = set()
missing = {}  # executable -> its cuda-labelled ctest tests
for t in listing["tests"]:
    # The test's executable: the command's word that is a file of this build (after mpiexec's flags
    # for an MPI test).
    exes = [os.path.basename(w) for w in t.get("command", [])
            if os.path.isabs(w) and w.startswith(os.path.abspath(build) + os.sep)]
    if not exes:
        failures.append("ctest %s (label cuda): no executable of this build in %s" % (t["name"], t.get("command")))
        continue
    if exes[0] not in by_exe:
        missing.setdefault(exes[0], []).append(t["name"])
    seen.add(exes[0])
for exe, tests in sorted(missing.items()):
    failures.append("%s: %d ctest tests labelled cuda (%s%s), but device_manifest.json has no step "
                    "running it: add pets_device_step(%s STEP ... TIMEOUT ...) beside its pets_add_test"
                    % (exe, len(tests), ", ".join(tests[:3]), ", ..." if len(tests) > 3 else "", exe))

all_tests = json.loads(subprocess.run([ctest, "--show-only=json-v1"], cwd=build, check=True,
                                      stdout=subprocess.PIPE, universal_newlines=True).stdout)["tests"]
not_built = {t["name"][:-len("_NOT_BUILT")] for t in all_tests if t["name"].endswith("_NOT_BUILT")}
for exe, step in by_exe.items():
    if exe in seen:
        continue
    if exe in not_built:
        print("SKIPPED: %s is not built (cmake --build %s --target pets_device_bundle)" % (exe, build))
        sys.exit(77)
    failures.append("step %s runs %s, which no ctest test labelled cuda runs" % (step, exe))

if failures:
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)
print("ok: device_manifest.json has a step for each of the %d cuda-labelled tests (%s)"
      % (len(listing["tests"]), ", ".join("%s: %s" % (s["step"], os.path.basename(s["executable"])) for s in steps)))
