"""Presses Ctrl-C once on a command, as a terminal would, and checks that it stops with status 75.

    python3 ctrl_c.py LOG START_S STOP_S COMMAND [ARG...]

Starts COMMAND (stdout and stderr into LOG), waits up to START_S seconds for its first epoch line
(`epoch 0:`), sends it one SIGINT and waits up to STOP_S seconds for it to end. Exits 0 when it
ended with status 75 (the documented stop), else with a message. Python starts the command because
a background job of a non-interactive shell would ignore SIGINT.
"""
import signal
import subprocess
import sys
import time

log_path, start_s, stop_s, command = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
name = command[0].rsplit("/", 1)[-1]
with open(log_path, "w") as log:
    p = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + start_s
    while "epoch 0:" not in open(log_path).read():
        if p.poll() is not None or time.time() > deadline:
            p.kill()
            sys.exit(f"{name} ended ({p.poll()}) or stalled before epoch 0")
        time.sleep(0.2)
    start = time.time()
    p.send_signal(signal.SIGINT)
    try:
        status = p.wait(timeout=stop_s)
    except subprocess.TimeoutExpired:
        p.kill()
        sys.exit(f"one SIGINT did not end {name} within {stop_s:.0f} s")
print(f"{name} ended {time.time() - start:.1f} s after SIGINT, status {status}")
sys.exit(0 if status == 75 else f"{name} exited {status} after SIGINT, want 75")
