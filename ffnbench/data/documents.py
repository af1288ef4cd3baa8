"""What a document is, by the names a source file may give as `documents:` (conf/data/<source>.yaml): `rows` (each
row of the dataset is one), or a rule that joins rows into documents, e.g. WikiText's lines into articles."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any


def _wikitext_articles(ds: Any) -> Any:
    """WikiText rows are lines; a document is an article, which starts at a ` = Title = ` line."""
    import datasets

    title = re.compile(r"^ = [^=].* = \n?$")
    articles: list[str] = []
    lines: list[str] = []
    for batch in ds.iter(batch_size=10_000):
        for line in batch["text"]:
            if title.match(line or "") and any(s.strip() for s in lines):
                articles.append("".join(lines))
                lines = []
            lines.append(line or "")
    articles.append("".join(lines))
    return datasets.Dataset.from_dict({"text": articles})


DOCUMENT_RULES: dict[str, Callable[[Any], Any]] = {"rows": lambda ds: ds, "wikitext_articles": _wikitext_articles}
