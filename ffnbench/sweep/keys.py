"""config.identity.identity_key for the thousands of configs a sweep's plan compares (`full`: ~4,000 jobs, each
keyed as a run and as a member of its tuning group): the same key, with each dotted key's membership of the ignored
keys looked up once per process instead of once per config (tests/sweep/test_planning.py checks the two agree)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ffnbench.config.identity import NON_IDENTITY_KEYS, _hashable, flatten

_KEPT: dict[tuple[tuple[str, ...], str], bool] = {}  # (ignored keys, dotted key) → whether the key counts


def config_key(config: Mapping, ignore: Iterable[str] = NON_IDENTITY_KEYS) -> frozenset:
    """identity_key(config, ignore): a hashable form of `config` less the `ignore`d keys, for grouping."""
    ignore = tuple(ignore)
    items = []
    for key, value in flatten(config).items():
        kept = _KEPT.get((ignore, key))
        if kept is None:
            kept = _KEPT[ignore, key] = not any(key == k or key.startswith(k + ".") for k in ignore)
        if kept and value is not None:
            items.append((key, _hashable(value)))
    return frozenset(items)
