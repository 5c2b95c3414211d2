"""Interrupts jobs/pets_train.ipynb's training cell as Jupyter's stop button does, and checks the
stop: the job writes a checkpoint and ends with status 75, and the cell run again resumes there.

    /usr/bin/python3 notebook_interrupt.py NOTEBOOK START_S STOP_S

Runs the notebook's code cells in a fresh kernel (settings from the environment, as nbconvert
would), starts the training cell, waits up to START_S seconds for its first `epoch 0:` line, then
interrupts the kernel (jupyter_client: SIGINT to the kernel's process group, which holds the
launcher too) and waits up to STOP_S seconds for the cell to end. Exits 0 when the cell showed
the stop line and the notebook's resume hint and ended in KeyboardInterrupt, and the cell run
again resumed from that checkpoint; else with a message.
"""
import json
import re
import sys
import time

from jupyter_client.manager import start_new_kernel

notebook, start_s, stop_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
cells = ["".join(c["source"]) for c in json.load(open(notebook))["cells"] if c["cell_type"] == "code"]
training = next(i for i, c in enumerate(cells) if c.startswith("args = ["))


def run_cell(kc, code, seconds, on_text=None):
    """Runs `code`; returns (its stream text, the error name or None). `on_text(text)` is called
    with the text so far after each output; it may act (interrupt)."""
    # stop_on_error=False: the interrupted cell's error must not abort the next request (ipykernel
    # drops what arrives just after an error otherwise).
    msg_id = kc.execute(code, stop_on_error=False)
    text, error = "", None
    deadline = time.time() + seconds
    while True:
        left = deadline - time.time()
        if left <= 0:
            sys.exit(f"a cell did not finish within {seconds:.0f} s; its output:\n{text}")
        try:
            msg = kc.get_iopub_msg(timeout=min(left, 1.0))
        except Exception:  # queue.Empty: nothing yet
            if on_text:
                on_text(text)
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            text += content["text"]
            if on_text:
                on_text(text)
        elif kind == "error":
            error = content["ename"]
        elif kind == "status" and content["execution_state"] == "idle":
            return text, error


km, kc = start_new_kernel(kernel_name="python3")
try:
    for code in cells[:training]:
        out, error = run_cell(kc, code, 300)
        if error:
            sys.exit(f"a set-up cell failed ({error}):\n{out}")
    interrupted = []

    def interrupt_after_first_epoch(text):
        if not interrupted and re.search(r"^epoch 0: ", text, re.M):
            interrupted.append(time.time())
            km.interrupt_kernel()

    out, error = run_cell(kc, cells[training], start_s + stop_s, interrupt_after_first_epoch)
    print(out)
    if not interrupted:
        sys.exit("the training cell ended before its first epoch line: nothing was interrupted")
    print(f"the cell ended {time.time() - interrupted[0]:.1f} s after the interrupt ({error})")
    stop = re.search(r"^stopped by signal 10 at (epoch \d+, step \d+) \(SIGUSR1\); checkpoint written",
                     out, re.M)
    if error != "KeyboardInterrupt":
        sys.exit(f"the interrupted cell ended in {error}, want KeyboardInterrupt")
    if not stop:
        sys.exit("no stop line: the ranks did not stop through a checkpoint")
    if "stopped: run this cell again to continue from the checkpoint" not in out:
        sys.exit("the notebook did not say how to continue")
    # Again: resumes at that step (interrupted again at once: the rest is the other tests').
    resumed = []

    def interrupt_on_resume(text):
        if not resumed and re.search(r"^resumed from .* at (epoch \d+, step \d+)", text, re.M):
            resumed.append(True)
            km.interrupt_kernel()

    again, error = run_cell(kc, cells[training], start_s + stop_s, interrupt_on_resume)
    at = re.search(r"^resumed from .* at (epoch \d+, step \d+)", again, re.M)
    if not at or at.group(1) != stop.group(1):
        sys.exit(f"run again, the cell did not resume at {stop.group(1)} (it ended in {error}):\n{again}")
    print(f"ok: interrupted at {stop.group(1)} with a checkpoint; the cell run again resumed there")
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    del kc, km  # now, not at interpreter exit, when logging is gone
