"""Command line: ``python -m ferrite_ref logits|random-model ...`` (see --help)."""

from __future__ import annotations

import argparse
import json
import sys

from .modeldir import write_model_dir
from .reference import Reference


def _parse_tokens(text: str) -> list:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tokens must be comma-separated integers, got {text!r}")


def _logits(args: argparse.Namespace) -> None:
    logits = Reference(args.model_dir, pinned=args.pinned).logits(args.tokens)
    json.dump(logits.tolist(), sys.stdout)
    sys.stdout.write("\n")


def _random_model(args: argparse.Namespace) -> None:
    with open(args.config, encoding="utf-8") as file:
        config = json.load(file)
    write_model_dir(args.dir, config, args.seed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ferrite_ref", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    logits = commands.add_parser("logits", help="print the f64 logits of every position as JSON")
    logits.add_argument("model_dir")
    logits.add_argument("--tokens", type=_parse_tokens, required=True, help="e.g. 1,2,3")
    logits.add_argument("--pinned", type=int, default=0, help="pinned prefix length (swa layers)")
    logits.set_defaults(run=_logits)

    random_model = commands.add_parser("random-model", help="write a model dir with random weights")
    random_model.add_argument("dir")
    random_model.add_argument("--config", required=True, help="config.json to use")
    random_model.add_argument("--seed", type=int, required=True)
    random_model.set_defaults(run=_random_model)

    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
