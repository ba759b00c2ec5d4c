"""Train many runs of ``runs.py`` at once on one GPU (tiny models are launch-latency
bound, so concurrent processes use the GPU far better than one after another).

    python -m ferrite_train.launch --out OUT --time-budget 420 [--runs a,b,...] [--deadline 540]
                                   [--registry MODULE]

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

from .runs import DEFAULT_REGISTRY, LM_STAGE2_LR, load_registry


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", help="comma-separated names (default: all)")
    ap.add_argument("--registry", default=DEFAULT_REGISTRY,
                    help="module whose all_runs() names the runs (default: %(default)s; the state study's: "
                         "research.study_runs, from tools/python)")
    ap.add_argument("--time-budget", type=float, required=True)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--lm-stage2", help="LM runs resume from DIR/<run> at LM_STAGE2_LR")
    ap.add_argument("--deadline", type=float, help="seconds after which survivors are killed")
    ap.add_argument("--end-by", type=float,
                    help="seconds after the launch by which every run's training stops (a run whose start "
                         "compiles for minutes, as fla's RWKV-7, trains in what is left of its budget)")
    ap.add_argument("--jobs", type=int, help="at most this many runs at once (queued in the order given)")
    ap.add_argument("--eager", action="store_true", help="no CUDA graphs")
    ap.add_argument("--init-dir", help="each run starts from DIR/<run> (a stage 2: fresh optimizer and schedule)")
    args = ap.parse_args(argv)
    runs = load_registry(args.registry)
    names = args.runs.split(",") if args.runs else list(runs)
    unknown = [n for n in names if n not in runs]
    if unknown:
        ap.error(f"unknown runs {unknown} in registry {args.registry}")
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs = {}
    t0 = time.time()
    here = Path(__file__).resolve().parents[1]

    def start(name):
        task = runs[name]["task"]
        budget = args.time_budget
        if args.deadline:
            # A run started late (queued by --jobs) gets the time left before the deadline,
            # less a minute for its start, final evaluation and export.
            budget = max(1.0, min(budget, args.deadline - (time.time() - t0) - 60))
        cmd = [sys.executable, "-m", "ferrite_train.train", "--run", name, "--out", str(out / task),
               "--time-budget", f"{budget:.0f}", "--registry", args.registry]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        if args.eager:
            cmd += ["--eager"]
        if args.end_by:
            cmd += ["--end-by", f"{t0 + args.end_by:.0f}"]
        if args.init_dir:
            cmd += ["--init-from", str(Path(args.init_dir).resolve() / name)]
        if args.lm_stage2 and name in LM_STAGE2_LR:
            cmd += ["--init-from", str(Path(args.lm_stage2).resolve() / name), "--lr", str(LM_STAGE2_LR[name])]
        log = open(out / "logs" / f"{name}.log", "w")
        procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(here))

    queue = list(names)
    deadline = t0 + (args.deadline or 1e9)
    while time.time() < deadline:
        running = sum(p.poll() is None for p in procs.values())
        while queue and (not args.jobs or running < args.jobs):
            start(queue.pop(0))
            running += 1
        if not queue and running == 0:
            break
        time.sleep(1)
    for name in queue:
        print(f"[launch] {name} never started (deadline)", flush=True)
    for name, p in procs.items():
        if p.poll() is None:
            print(f"[launch] {name} still running at the deadline: terminating", flush=True)
            p.terminate()
    time.sleep(2)
    print(f"[launch] all done in {time.time() - t0:.0f}s", flush=True)
    for name in [n for n in names if n in procs]:
        task = runs[name]["task"]
        m = out / task / name / "metrics.json"
        if m.exists():
            d = json.loads(m.read_text())
            tr = d["training"]
            print(f"{name:12s} rc={procs[name].returncode} steps={tr['steps_run']:6d} t={tr['train_seconds']:6.0f}s "
                  f"({tr['steps_run'] / max(tr['train_seconds'], 1e-9):.1f}/s, {tr.get('step_mode', '')[:40]}) "
                  f"state/layer={d['state_bytes_per_layer'][0]:6d}B {d['pytorch']}", flush=True)
        else:
            tail = (out / "logs" / f"{name}.log").read_text()[-600:]
            print(f"{name:12s} rc={procs[name].returncode} NO METRICS\n{tail}", flush=True)


if __name__ == "__main__":
    main()
