"""Train many runs of ``runs.py`` at once on one GPU (tiny models are launch-latency
bound, so concurrent processes use the GPU far better than one after another).

    python -m ferrite_train.launch --out OUT --time-budget 420 [--runs a,b,...] [--deadline 540]

Each run is its own process (``python -m ferrite_train.train``), logging to
OUT/logs/<run>.log. Processes still alive at the deadline are terminated (the
last checkpoint export stays). Prints a summary table of every metrics.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .runs import LM_STAGE2_LR, all_runs


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", help="comma-separated names (default: all)")
    ap.add_argument("--time-budget", type=float, required=True)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--lm-stage2", help="LM runs resume from DIR/<run> at LM_STAGE2_LR")
    ap.add_argument("--deadline", type=float, help="seconds after which survivors are killed")
    args = ap.parse_args(argv)
    names = args.runs.split(",") if args.runs else list(all_runs())
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs = {}
    t0 = time.time()
    for name in names:
        task = all_runs()[name]["task"]
        cmd = [sys.executable, "-m", "ferrite_train.train", "--run", name, "--out", str(out / task),
               "--time-budget", str(args.time_budget)]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        if args.lm_stage2 and task == "lm":
            cmd += ["--init-from", str(Path(args.lm_stage2).resolve() / name), "--lr", str(LM_STAGE2_LR[name])]
        log = open(out / "logs" / f"{name}.log", "w")
        procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                       cwd=str(Path(__file__).resolve().parents[1]))
    deadline = t0 + (args.deadline or 1e9)
    while any(p.poll() is None for p in procs.values()) and time.time() < deadline:
        time.sleep(2)
    for name, p in procs.items():
        if p.poll() is None:
            print(f"[launch] {name} still running at the deadline: terminating", flush=True)
            p.terminate()
    time.sleep(2)
    print(f"[launch] all done in {time.time() - t0:.0f}s", flush=True)
    for name in names:
        task = all_runs()[name]["task"]
        m = out / task / name / "metrics.json"
        if m.exists():
            d = json.loads(m.read_text())
            tr = d["training"]
            print(f"{name:12s} rc={procs[name].returncode} steps={tr['steps_run']:6d} t={tr['train_seconds']:6.0f}s "
                  f"state/layer={d['state_bytes_per_layer'][0]:6d}B {d['pytorch']}", flush=True)
        else:
            tail = (out / "logs" / f"{name}.log").read_text()[-600:]
            print(f"{name:12s} rc={procs[name].returncode} NO METRICS\n{tail}", flush=True)


if __name__ == "__main__":
    main()
