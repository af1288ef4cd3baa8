"""`python -m ffnbench.data`: prepare (tokenize and cache) a corpus and print its size.

    python -m ffnbench.data [overrides]     # e.g. data=tinystories data.tokenizer=bpe: prepare and print sizes
"""

from __future__ import annotations

import sys

from ffnbench.cli import user_errors_exit
from ffnbench.data.corpus import SPLITS
from ffnbench.data.module import LMDataModule


def _summary(dm: LMDataModule) -> None:
    from rich.console import Console
    from rich.table import Table

    info = dm.info
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"{info['source']}: {info['tokenizer']} tokens, content {info['content_hash']}")
    table = Table()
    for column in ("split", "docs", "bytes", "tokens", "bytes/token"):
        table.add_column(column, justify="left" if column == "split" else "right")
    for split in SPLITS:
        s = info[split]
        table.add_row(split, f"{s['docs']:,}", f"{s['bytes']:,}", f"{s['tokens']:,}", f"{s['bytes'] / s['tokens']:.3f}")
    console.print(table)
    bpt = info["val_bytes_per_token"]
    console.print(f"validation set: {info['val_windows']:,} windows of {dm.seq_len} tokens, {bpt:.4f} bytes per "
                  f"target token: bits per byte = loss / (ln 2 × {bpt:.4f})")
    console.print(f"cache: {info['cache_dir']}")
    how = "served from the cache" if info["from_cache"] else "built"
    console.print(f"{how} in {info['seconds']:.3f} s")


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    """`python -m ffnbench.data [overrides]`: prepare (tokenize and cache) a corpus and print its size."""
    from ffnbench.config.compose import compose

    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print("usage:\n" + __doc__.split("\n\n")[1])
        return
    cfg = compose(args)
    dm = LMDataModule(cfg.data, seq_len=cfg.model.seq_len, seed=cfg.seed)
    dm.prepare_data()
    dm.setup()
    _summary(dm)


if __name__ == "__main__":
    main()
