"""Checks a jobs/pets_train.ipynb executed headless (jupyter nbconvert --execute).

    python3 check_notebook.py EXECUTED.ipynb EPOCHS [--contains TEXT]... [--lacks TEXT]... [--images N]

Every code cell ran, none ended in an error, the training cell streamed `epoch N: XX.XX` for
N = 0 .. EPOCHS-1 and the plot cell listed the same epochs; each TEXT given with --contains is in
the cells' stream output, each given with --lacks is not; at least N cells showed an image.
Prints one line on success; exits with the first failed check's message otherwise.
"""
import argparse
import json
import re
import sys

parser = argparse.ArgumentParser()
parser.add_argument("notebook")
parser.add_argument("epochs", type=int)
parser.add_argument("--contains", action="append", default=[])
parser.add_argument("--lacks", action="append", default=[])
parser.add_argument("--images", type=int, default=0)
args = parser.parse_args()

code = [c for c in json.load(open(args.notebook))["cells"] if c["cell_type"] == "code"]
text, images = [], 0
for c in code:
    if not c.get("execution_count"):
        sys.exit("a code cell did not run")
    for o in c.get("outputs", []):
        if o["output_type"] == "error":
            sys.exit(f"cell error: {o.get('ename')}: {o.get('evalue')}")
        if o["output_type"] == "stream":
            text.append("".join(o["text"]))
        elif "image/png" in o.get("data", {}):
            images += 1
out = "".join(text)
for want in args.contains:
    if want not in out:
        sys.exit(f"the output lacks {want!r}")
for unwanted in args.lacks:
    if unwanted in out:
        sys.exit(f"the output has {unwanted!r}")
trained = re.findall(r"^epoch (\d+): \d+\.\d\d$", out, re.M)
if trained != [str(e) for e in range(args.epochs)]:
    sys.exit(f"epoch lines {trained}, want 0..{args.epochs - 1}")
plotted = re.findall(r"^epoch (\d+): accuracy", out, re.M)
if plotted != trained:
    sys.exit(f"the plot cell shows epochs {plotted}, not the run's {trained}")
if images < args.images:
    sys.exit(f"{images} image(s) shown, want at least {args.images}")
print(f"ok: notebook: every cell ran, epochs {trained} trained and plotted, {images} image(s)")
