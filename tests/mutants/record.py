#!/usr/bin/env python3
"""Writes tests/mutants/outcomes.tsv from cargo-mutants output directories.

    python3 tests/mutants/record.py FIRST_RUN_DIR... [--verify VERIFY_DIR...]
    python3 tests/mutants/record.py --add COMMIT FIRST_RUN_DIR... [--verify VERIFY_DIR...]
    python3 tests/mutants/record.py --add COMMIT RERUN_DIR... --first-missed LIST
    python3 tests/mutants/record.py --add COMMIT MISSED_RERUN_DIR... --first-missed LIST --listed ALL

Each FIRST_RUN_DIR is a `-o` directory of a first run (it holds
`mutants.out/outcomes.json`); each VERIFY_DIR one of the re-run of the
missed mutants after tests were added. `--first-missed LIST` is for a
first run whose `outcomes.json` was not kept, only the list of the mutants
it missed (LIST: one `location: mutant` a line, `#` comments): the
directories are then those of a re-run of every mutant on the same code
with the tests added, and a mutant's first-run outcome is `missed` where
LIST names it and the re-run's otherwise (caught stays caught and unviable
stays unviable when only tests were added; a first run with timeouts cannot
be recorded this way). With `--listed ALL` as well (ALL: what `cargo
mutants --list` names for the mutated files on the same code), the
directories are those of a re-run of the missed mutants alone, for a first
run whose every mutant was caught or missed (no unviable, no timeout): the
mutants of ALL that LIST does not name are recorded caught in both columns
(only tests were added), the others missed first and as re-run after.
Without `--add` the record is
rewritten from these runs alone; with `--add COMMIT` the rows of the files
these runs mutated replace that file's old rows (if any) and the others are
kept, under a comment naming the tree they were run on. docs/testing.md
("Mutation testing") shows the table `tests/tests/mutants.rs` derives from
the record.
"""
import json
import pathlib
import sys

SHORT = {"CaughtMutant": "caught", "MissedMutant": "missed", "Unviable": "unviable", "Timeout": "timeout"}


def outcomes(d):
    data = json.loads((pathlib.Path(d) / "mutants.out" / "outcomes.json").read_text())
    for o in data["outcomes"]:
        if "Mutant" in o["scenario"]:
            yield o["scenario"]["Mutant"]["name"], SHORT[o["summary"]]


def main(argv):
    add = None
    if argv[:1] == ["--add"]:
        add, argv = argv[1], argv[2:]
    first_missed = None
    if "--first-missed" in argv:
        i = argv.index("--first-missed")
        text = pathlib.Path(argv[i + 1]).read_text()
        first_missed = {l for l in text.splitlines() if l.strip() and not l.startswith("#")}
        argv = argv[:i] + argv[i + 2 :]
    listed = None
    if "--listed" in argv:
        i = argv.index("--listed")
        text = pathlib.Path(argv[i + 1]).read_text()
        listed = [l for l in text.splitlines() if l.strip() and not l.startswith("#")]
        argv = argv[:i] + argv[i + 2 :]
        if first_missed is None:
            sys.exit("--listed goes with --first-missed")
        if len(set(listed)) != len(listed) or not first_missed <= set(listed):
            sys.exit("--listed: names repeated, or a missed mutant not listed")
    split = argv.index("--verify") if "--verify" in argv else len(argv)
    first, verify = argv[:split], argv[split + 1 :]
    again = dict(kv for d in verify for kv in outcomes(d))
    if first_missed is not None:
        if verify:
            sys.exit("--first-missed: the directories are the re-run's; no --verify")
        rerun = dict(kv for d in first for kv in outcomes(d))
        if listed is not None and set(rerun) != first_missed:
            sys.exit("--listed: the directories must re-run exactly the missed mutants")
        for name in sorted(first_missed):
            if rerun.get(name, "unviable") == "unviable":
                sys.exit(f"listed as missed but not a viable mutant of the re-run: {name}")
        again = rerun
    out = pathlib.Path(__file__).with_name("outcomes.tsv")
    lines = [
        '# cargo mutants 27.1.0 on the tree of fb1eea3 (docs/testing.md, "Mutation testing").',
        "# location\tfirst run\twith the new tests\tmutant",
    ]
    if add:
        files = {name.split(":", 1)[0] for d in first for name, _ in outcomes(d)}
        kept = out.read_text().splitlines()
        lines = [l for l in kept if l.startswith("#") or l.split(":", 1)[0] not in files]
        lines.append(f"# {', '.join(sorted(files))}: cargo mutants 27.1.0 on the tree of {add}.")
    if listed is not None:
        runs = [(name, "missed" if name in first_missed else "caught") for name in listed]
    else:
        runs = [(name, result) for d in first for name, result in outcomes(d)]
    for name, result in runs:
        if first_missed is not None:
            result = "missed" if name in first_missed else result
        if result == "missed" and name not in again:
            sys.exit(f"missed mutant not re-run: {name}")
        location, mutant = name.split(": ", 1)
        lines.append(f"{location}\t{result}\t{again.get(name, result)}\t{mutant}")
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
