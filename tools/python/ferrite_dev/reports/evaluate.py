"""Quantize every shipped model and measure it with the Rust runtime (host).

    cargo build --release -p ferrite-tools
    ferrite-eval-models [--bin target/release/ferrite] [--only NAME ...]   # python -m ferrite_dev.reports.evaluate

For each models/mqar/<run> and models/lm/<size>: `ferrite quantize` into a
temporary directory, once per variant of VARIANTS,

    f32          --dtype f32
    int8         --dtype int8 --layout rows   row-major, f32 group scales, f32 activations
    int8_tiled   --dtype int8 --layout tiled  the integer path (int8 activations)
    int4         --dtype int4 --layout rows
    int4_tiled   --dtype int4 --layout tiled  (the int4 defaults: scale search, groups of 32, ...)
    int4_calibrated  int4_tiled with --calibrate models/lm/calibration.txt (LMs)
                     or --calibrate-mqar 64 (MQAR models): GPTQ
    int8_int     int8_tiled with --path int: the integer token path (image format 6,
                 integer states where the mixer has them; docs/integer-path.md)

(`int8`/`int4` are the figures recorded before the integer path existed, when
row-major was the only layout), then

    ferrite eval <image> --mqar --seed 0 --n 1000      (last line accuracy=...)
    ferrite eval <image> --text models/lm/heldout.txt  (last line bits_per_byte=...)

and writes the results under "runtime" in the model's metrics.json: the number
(and MQAR's count of correct queries), the image's flash bytes, RAM bytes and
state bytes (from `ferrite quantize`'s summary line) and the per-layer state
bytes from `ferrite inspect`. `--check` measures without writing and fails
when a figure differs from the recorded one (the runtime is deterministic, so
they must be equal). docs/quantization.md's integer-path table is
`ferrite-models-report --integer`.

`--quick` records (and `--quick --check` re-measures, as the python tests do
when FERRITE_BIN is set, so `cargo xtask test` runs it) a short version: the
QUICK_VARIANTS images on the first QUICK_MQAR_N MQAR sequences (the count of
correct queries, exact) or the first QUICK_TEXT_BYTES bytes of each held-out
text (the summed nats, to QUICK_REL_TOL), under "quick" in "runtime".
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import REPO_ROOT as ROOT

# variant -> `ferrite quantize` arguments
VARIANTS = {
    "f32": ["--dtype", "f32"],
    "int8": ["--dtype", "int8", "--layout", "rows"],
    "int8_tiled": ["--dtype", "int8", "--layout", "tiled"],
    "int4": ["--dtype", "int4", "--layout", "rows"],
    "int4_tiled": ["--dtype", "int4", "--layout", "tiled"],
    "int4_calibrated": ["--dtype", "int4", "--layout", "tiled"],
    "int8_int": ["--dtype", "int8", "--layout", "tiled", "--path", "int"],
}
# int4_calibrated's calibration (GPTQ, docs/quantization.md "int4"), per task:
# 16 KB of the LMs' training pool, or 64 MQAR sequences of seed 1.
CALIBRATION = {"lm": ["--calibrate", ROOT / "models/lm/calibration.txt"], "mqar": ["--calibrate-mqar", "64"]}
# The recorded MQAR evaluation (docs/mqar.md defaults, the "eval" field of metrics.json).
MQAR_SEED, MQAR_N = 0, 1000
# `--quick`: the variants, MQAR sequences (of seed 0) and held-out bytes re-measured by
# `cargo xtask test`, and how far the nats may move (the runtime is deterministic: the
# tolerance covers only the decimal round trip of the printed figure).
QUICK_VARIANTS = ("f32", "int8_tiled", "int8_int")
QUICK_MQAR_N, QUICK_TEXT_BYTES, QUICK_REL_TOL = 16, 1024, 1e-9
# Families whose models the integer token path (`int8_int`) refuses, and why: `ferrite
# quantize --path int` refuses them with the same reason, so they have no such figure.
NO_TOKEN_PATH = {"rwkv7": "LayerNorm (with bias): the integer token path runs RMSNorm only"}


def token_path_refusal(metrics: dict):
    """Why the integer token path refuses this model (None when it runs it)."""
    return NO_TOKEN_PATH.get(metrics["family"].split("-")[0])


def variants_of(metrics: dict, variants) -> list:
    """``variants`` less the integer token path where it refuses the model."""
    return [v for v in variants if not (v == "int8_int" and token_path_refusal(metrics))]


def run(cmd: list, stderr_too: bool = False) -> str:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True)
    return done.stdout + (done.stderr if stderr_too else "")


def heldout_texts(metrics: dict) -> dict:
    """An LM's held-out texts: key -> file. Models trained on the English text
    (metrics "eval" names english-heldout.txt) score on its held-out part and,
    to compare with the fortunes models, on the fortunes' held-out text."""
    if metrics.get("eval", "").startswith("english-heldout.txt"):
        return {"bits_per_byte": ROOT / "models/lm/heldout-english.txt",
                "bits_per_byte_fortunes": ROOT / "models/lm/heldout.txt"}
    return {"bits_per_byte": ROOT / "models/lm/heldout.txt"}


def score(bin_path: Path, image: Path, task: str, texts: dict = None) -> dict:
    """`ferrite eval` of an image on the recorded task: MQAR accuracy and correct count, or
    bits per byte on each held-out text (default: the fortunes')."""
    if task == "mqar":
        out = run([bin_path, "eval", image, "--mqar", "--seed", MQAR_SEED, "--n", MQAR_N])
        return {"accuracy": float(out.strip().splitlines()[-1].split("=")[1]),
                "correct": int(re.search(r"correct=(\d+)", out).group(1))}
    result = {}
    for key, text in (texts or {"bits_per_byte": ROOT / "models/lm/heldout.txt"}).items():
        out = run([bin_path, "eval", image, "--text", text])
        result[key] = float(out.strip().splitlines()[-1].split("=")[1])
    return result


def ordered(runtime: dict) -> dict:
    """metrics.json's "runtime" in its fixed key order (unknown keys dropped)."""
    return {k: runtime[k] for k in ["state_bytes_per_layer", *VARIANTS, "quick", "commands"] if k in runtime}


def measure(bin_path: Path, model_dir: Path, tmp: Path, variants: list, check: bool) -> dict:
    metrics_path = model_dir / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    task = metrics["task"]
    runtime = dict(metrics.get("runtime", {}))
    variants = variants_of(metrics, variants)
    for variant in variants:
        image = tmp / f"{model_dir.parent.name}-{model_dir.name}-{variant}.fer"
        args = VARIANTS[variant] + (CALIBRATION[task] if variant == "int4_calibrated" else [])
        summary = run([bin_path, "quantize", model_dir, "-o", image, *args], True).strip().splitlines()[-1]
        flash = int(re.search(r"(\d+) bytes flash", summary).group(1))
        ram = re.search(r"(\d+) bytes RAM \((\d+) state\)", summary)
        entry = {"image_bytes": flash, "ram_bytes": int(ram.group(1)), "state_bytes": int(ram.group(2))}
        if variant == "f32":
            inspect = run([bin_path, "inspect", image], True)
            runtime["state_bytes_per_layer"] = [int(x) for x in re.findall(r"state (?:[a-z0-9]+ )?(\d+) bytes", inspect)]
        entry.update(score(bin_path, image, task, heldout_texts(metrics)))
        if check and variant in runtime:
            recorded = {k: runtime[variant][k] for k in entry if k in runtime[variant]}
            if recorded != {k: entry[k] for k in recorded}:
                raise SystemExit(f"{model_dir.relative_to(ROOT)} {variant}: measured {entry}, recorded {runtime[variant]}")
        runtime[variant] = entry
    runtime["commands"] = ("ferrite quantize <dir> -o <img> --dtype {f32,int8,int4} [--layout rows] "
                           "(int8/int4: --layout rows; int8_tiled/int4_tiled: --layout tiled; int8_int: --layout tiled "
                           "--path int; int4_calibrated: "
                           + ("--layout tiled --calibrate models/lm/calibration.txt" if task == "lm"
                              else "--layout tiled --calibrate-mqar 64") + "); "
                           + (f"ferrite eval <img> --mqar --seed {MQAR_SEED} --n {MQAR_N}" if task == "mqar"
                              else "ferrite eval <img> --text " + " / ".join(
                                  str(t.relative_to(ROOT)) for t in heldout_texts(metrics).values())))
    metrics["runtime"] = ordered(runtime)
    if not check:
        metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
    key = "accuracy" if task == "mqar" else "bits_per_byte"
    print(f"{model_dir.relative_to(ROOT)}: pytorch {metrics['pytorch'][key]:.4f} | "
          + " ".join(f"{v} {runtime[v][key]:.4f}" for v in variants), flush=True)
    return metrics


def model_dirs() -> list:
    """Every shipped model this script measures (models/mqar-256, the state study's
    256-token MQAR, is measured by ferrite-study-report --eval)."""
    return sorted(p.parent for p in (ROOT / "models").glob("*/*/metrics.json") if p.parent.parent.name != "mqar-256")


def quick(bin_path: Path, model_dir: Path, tmp: Path) -> dict:
    """The `--quick` figures of one model: per QUICK_VARIANTS image, MQAR's correct count on
    QUICK_MQAR_N sequences, or the nats of the first QUICK_TEXT_BYTES bytes of each held-out
    text (one chunk: the state is never reset)."""
    metrics = json.loads((model_dir / "metrics.json").read_text())
    task = metrics["task"]
    figures = {}
    for variant in variants_of(metrics, QUICK_VARIANTS):
        image = tmp / f"quick-{model_dir.parent.name}-{model_dir.name}-{variant}.fer"
        run([bin_path, "quantize", model_dir, "-o", image, *VARIANTS[variant]])
        if task == "mqar":
            out = run([bin_path, "eval", image, "--mqar", "--seed", MQAR_SEED, "--n", QUICK_MQAR_N])
            figures[variant] = {"correct": int(re.search(r"correct=(\d+)", out).group(1))}
            continue
        figures[variant] = {}
        for key, text in heldout_texts(metrics).items():
            head = tmp / f"quick-{text.stem}.txt"
            head.write_bytes(text.read_bytes()[:QUICK_TEXT_BYTES])
            out = run([bin_path, "eval", image, "--text", head, "--chunk", QUICK_TEXT_BYTES])
            figures[variant][key.replace("bits_per_byte", "nats")] = float(re.search(r"nats=(\S+)", out).group(1))
    return figures


def quick_differences(recorded: dict, measured: dict) -> list:
    """Where `measured` (quick()) departs from `recorded`: counts exactly, nats to QUICK_REL_TOL."""
    out = []
    for variant, want in recorded.items():
        for key, w in want.items():
            got = measured.get(variant, {}).get(key)
            same = got == w if isinstance(w, int) else got is not None and abs(got - w) <= QUICK_REL_TOL * abs(w)
            if not same:
                out.append(f"{variant} {key}: recorded {w}, measured {got}")
    if set(measured) != set(recorded):
        out.append(f"variants: recorded {sorted(recorded)}, measured {sorted(measured)}")
    return out


# The weight matrices grouped by the activation vector they read; on the
# integer path each such vector is quantized to int8 once (one scale).
TENSOR_CLASSES = {
    "mixer inputs": "q/k/v and gate projections: the mixer's normed input",
    "o_proj": "the mixer's output",
    "mlp gate/up": "the MLP's normed input",
    "down_proj": "the SwiGLU product",
    "lm_head": "the final norm (tied: the embedding table, whose lookups are weight-only)",
}


def class_rules(name: str, dtype: str) -> list:
    """`--rule` arguments that store one class of TENSOR_CLASSES as `dtype`, every other tensor f32."""
    rules = {
        "mixer inputs": ["model.layers.*.attn.o_proj.weight=f32", f"model.layers.*.attn.*_proj.weight={dtype}"],
        "o_proj": [f"model.layers.*.attn.o_proj.weight={dtype}"],
        "mlp gate/up": [f"model.layers.*.mlp.gate_proj.weight={dtype}", f"model.layers.*.mlp.up_proj.weight={dtype}"],
        "down_proj": [f"model.layers.*.mlp.down_proj.weight={dtype}"],
        "lm_head": [f"model.embeddings.weight={dtype}"],
    }[name]
    return [a for r in rules for a in ("--rule", r)]


def attribute(bin_path: Path, model_dir: Path, tmp: Path, dtype: str) -> str:
    """Per tensor class: the task's figure with only that class quantized to `dtype`
    (every other tensor f32), row-major (f32 activations) and tiled (int8 activations).
    Their difference is what quantizing that class's input vector costs, on top of
    the (nearly equal) weight error of the two layouts. Returns a markdown table."""
    metrics = json.loads((model_dir / "metrics.json").read_text())
    task = metrics["task"]
    key = "accuracy" if task == "mqar" else "bits_per_byte"
    tied = json.loads((model_dir / "config.json").read_text()).get("tie_word_embeddings", True)
    if not tied:
        raise SystemExit(f"{model_dir}: --attribute handles tied embeddings only")
    f32 = metrics["runtime"]["f32"][key]
    rows = [f"`{model_dir.relative_to(ROOT)}`, only this class {dtype} (f32 {f32:.4f}) | input | rows | tiled | tiled - rows |",
            "|---|---|---:|---:|---:|"]
    for name, what in TENSOR_CLASSES.items():
        got = {}
        for layout in ("rows", "tiled"):
            image = tmp / f"{model_dir.name}-{name.replace(' ', '_').replace('/', '_')}-{dtype}-{layout}.fer"
            run([bin_path, "quantize", model_dir, "-o", image, *class_rules(name, dtype), "--layout", layout])
            got[layout] = score(bin_path, image, task)[key]
        rows.append(f"| {name} | {what} | {got['rows'] - f32:+.4f} | {got['tiled'] - f32:+.4f} "
                    f"| {got['tiled'] - got['rows']:+.4f} |")
    table = "\n".join(rows)
    print(table + "\n", flush=True)
    return table


def _class_of(name: str) -> str:
    if name == "model.embeddings.weight" or name == "lm_head.weight":
        return "lm_head"
    for suffix, cls in (("attn.o_proj.weight", "o_proj"), ("mlp.down_proj.weight", "down_proj"),
                        ("mlp.gate_proj.weight", "mlp gate/up"), ("mlp.up_proj.weight", "mlp gate/up")):
        if name.endswith(suffix):
            return cls
    return "mixer inputs"


def _quantize_weights(w, qmax: int, group: int, tiled: bool):
    """What `ferrite quantize` stores, dequantized (tools/src/quant.rs): symmetric
    groups of `group` inputs, f32 scales (rows) or two-level d[r] * m[r][g] (tiled)."""
    import numpy as np

    g = w.reshape(w.shape[0], -1, group)
    s = np.abs(g).max(axis=2) / qmax
    if tiled:
        d = s.max(axis=1, keepdims=True) / 255
        s = np.where(d > 0, d * np.clip(np.ceil(s / np.where(d > 0, d, 1)), 1, 255), 0)
    q = np.clip(np.round(g / np.where(s > 0, s, 1)[..., None]), -qmax, qmax)
    return (q * s[..., None]).reshape(w.shape)


def activations(model_dir: Path, n: int) -> str:
    """Runs the f64 numpy reference (tools/python/ferrite_ref) over the first `n`
    bytes of the held-out text (512-byte chunks, as `ferrite eval --text`) or the
    first `n` recorded MQAR sequences and, for every weight matrix's input vector,
    measures what each quantization does to the product y = W x: the relative RMS
    error ||W x - W' x'|| / ||W x|| over all products of a tensor class, with x' the
    integer path's int8 quantization of x (one scale per vector) and W exact, or x
    exact and W' int8 per row (tiled default), int8 in groups (rows), int4 tiled.
    Also the vectors' crest factor max|x| / rms(x), which sets the int8 step of x
    relative to its size, and whether the maximum sits in a fixed channel: per
    tensor the share of its input vectors whose largest entry is in the tensor's
    most frequent such channel (the class's range over its tensors). Returns a
    markdown table."""
    import numpy as np

    from ferrite_ref import mqar
    from ferrite_ref.reference import Reference

    ref = Reference(model_dir)
    stats: dict = {}

    class Probe(np.ndarray):
        def __matmul__(self, x):
            w = np.asarray(self)
            x = np.asarray(x)
            y = w @ x
            name = getattr(self, "tensor", None)
            if name is not None and x.ndim == 1:
                amax = np.abs(x).max()
                xq = np.clip(np.round(x * 127 / amax), -127, 127) * amax / 127 if amax > 0 else x
                st = stats.setdefault(_class_of(name), {"crest": [], "y": 0.0, "act": 0.0, "w8": 0.0,
                                                        "w8rows": 0.0, "w4": 0.0, "worst": {}})
                st["crest"].append(amax / np.sqrt(np.mean(x * x)) if amax > 0 else 0.0)
                st["y"] += y @ y
                e = w @ (x - xq)
                st["act"] += e @ e
                st["worst"][name] = st["worst"].get(name, 0.0) + e @ e / max(y @ y, 1e-300)
                argmaxes = st.setdefault("argmax", {}).setdefault(name, {})
                c = int(np.abs(x).argmax())
                argmaxes[c] = argmaxes.get(c, 0) + 1
                for key, wq in self.quantized.items():
                    e = wq @ x - y
                    st[key] += e @ e
            return y

    def probe(w, name):
        p = w.view(Probe)
        p.tensor = name
        cols = w.shape[1]
        rows_group = next(g for g in (64, 32, 16, 8) if cols % g == 0)
        tiled4_group = next((g for g in (64, 32, 16) if cols % g == 0), rows_group)
        p.quantized = {"w8": _quantize_weights(w, 127, cols, True),
                       "w8rows": _quantize_weights(w, 127, rows_group, False),
                       "w4": _quantize_weights(w, 7, tiled4_group, True)}
        return p

    ref.lm_head = probe(ref.lm_head, "model.embeddings.weight" if ref.config.tie_word_embeddings
                        else "lm_head.weight")
    for i, (w, mixer) in enumerate(ref.layers):
        for key in list(w):
            if key.endswith("_proj.weight"):
                w[key] = probe(w[key], f"model.layers.{i}.{key}")
        for key in list(mixer.w):
            if key.endswith("_proj.weight"):
                mixer.w[key] = probe(mixer.w[key], f"model.layers.{i}.attn.{key}")
    task = json.loads((model_dir / "metrics.json").read_text())["task"]
    if task == "mqar":
        tokens, _, _ = mqar.generate_batch(MQAR_SEED, n)
        for seq in tokens:
            ref.logits(seq)
        what = f"first {n} of the recorded MQAR sequences"
    else:
        text = (ROOT / "models/lm/heldout.txt").read_bytes()[:n]
        for i in range(0, len(text), 512):
            ref.logits(list(text[i:i + 512])[:-1])
        what = f"first {n} bytes of heldout.txt"
    out = [f"`{model_dir.relative_to(ROOT)}`, {what} | products | crest mean / max | "
           "x int8 (integer path) | W int8 per row (tiled) | W int8 groups (rows) | W int4 tiled | worst tensor (x int8) "
           "| max in the top channel |",
           "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for cls in TENSOR_CLASSES:
        st = stats[cls]
        rel = {k: np.sqrt(st[k] / st["y"]) for k in ("act", "w8", "w8rows", "w4")}
        worst = max(st["worst"], key=st["worst"].get)
        crest = np.array(st["crest"])
        shares = [max(a.values()) / sum(a.values()) for a in st["argmax"].values()]
        out.append(f"| {cls} | {len(crest)} | {crest.mean():.1f} / {crest.max():.1f} | {rel['act']:.2e} "
                   f"| {rel['w8']:.2e} | {rel['w8rows']:.2e} | {rel['w4']:.2e} | `{worst}` "
                   f"| {min(shares):.0%}-{max(shares):.0%} |")
    table = "\n".join(out)
    print(table + "\n", flush=True)
    return table


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/ferrite"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--variants", nargs="*", choices=list(VARIANTS), default=list(VARIANTS))
    ap.add_argument("--quick", action="store_true",
                    help="record (with --check: re-measure) the short figures cargo xtask test checks")
    ap.add_argument("--check", action="store_true",
                    help="measure, write nothing, fail when a figure differs from the recorded one")
    ap.add_argument("--attribute", choices=["int8", "int4"],
                    help="write nothing; per tensor class, the figure with only that class at this dtype, "
                         "rows vs tiled (docs/quantization.md)")
    ap.add_argument("--activations", type=int, metavar="N",
                    help="write nothing; with the numpy reference, the error each quantization adds to "
                         "the products, per tensor class, over N held-out bytes or MQAR sequences")
    args = ap.parse_args(argv)
    dirs = model_dirs()
    if args.only:
        dirs = [d for d in dirs if d.name in args.only]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        if args.activations:
            list(pool.map(lambda d: activations(d, args.activations), dirs))
            return
        if args.quick:
            failed = []
            for d in dirs:
                measured = quick(Path(args.bin), d, Path(tmp))
                path = d / "metrics.json"
                metrics = json.loads(path.read_text())
                if args.check:
                    failed += [f"{d.relative_to(ROOT)} {x}" for x in
                               quick_differences(metrics["runtime"].get("quick", {}), measured)]
                else:
                    metrics["runtime"]["quick"] = measured
                    metrics["runtime"] = ordered(metrics["runtime"])
                    path.write_text(json.dumps(metrics, indent=2) + "\n")
                print(f"{d.relative_to(ROOT)}: {measured}", flush=True)
            if failed:
                raise SystemExit("\n".join(failed))
            return
        if args.attribute:
            list(pool.map(lambda d: attribute(Path(args.bin), d, Path(tmp), args.attribute), dirs))
            return
        list(pool.map(lambda d: measure(Path(args.bin), d, Path(tmp), args.variants, args.check), dirs))


if __name__ == "__main__":
    main()
