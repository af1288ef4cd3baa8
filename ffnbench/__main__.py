"""`ffnbench <command> [args]` / `python -m ffnbench <command> [args]`.

Commands: params, data, train, sweep, report, bench, sample. Each is also `python -m ffnbench.<module>`."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "params": ("ffnbench.params", "parameter and FLOP tables: the documents' models, or any config"),
    "data": ("ffnbench.data", "prepare (tokenize and cache) a corpus and print its size"),
    "train": ("ffnbench.train", "train one model (Hydra overrides; -m for a sweep)"),
    "sweep": ("ffnbench.sweep.cli", "plan and launch a sweep preset in rounds (what `make sweep` runs)"),
    "report": ("ffnbench.report", "write REPORT.md and figures for a sweep directory"),
    "sample": ("ffnbench.sample", "text a trained run writes (its checkpoint, its tokenizer)"),
    "bench": ("ffnbench.bench", "performance benchmarks, recorded as ratios"),
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help") or argv[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
        print("usage: ffnbench <command> [args]\n\ncommands:\n" + "\n".join(lines))
        if argv and argv[0] not in ("-h", "--help", "help"):
            print(f"\nffnbench: error: unknown command {argv[0]!r}", file=sys.stderr)
            sys.exit(2)
        return
    module_name = COMMANDS[argv[0]][0]
    sys.argv = [f"ffnbench {argv[0]}", *argv[1:]]
    importlib.import_module(module_name).main()


if __name__ == "__main__":
    main()
