"""A sweep's jobs composed to what their runs will resolve: each job's resolved config (as the run stores it) and its
run directory, for thousands of jobs in seconds.

Hydra composes a job in two parts: the config groups it selects (experiment=..., ffn=..., model=...), merged into one
config, then its value overrides (seed=..., optim.lr=..., model.init=...) set on that config. A sweep's jobs select a
few dozen distinct sets of groups and differ mostly in values, so here each set of groups is composed by Hydra once and
resolved once into a plain dict (`Base`), and each job's values are set on a copy of that dict, as Hydra's
ConfigLoaderImpl._apply_overrides_to_config sets them (OmegaConf.update of a leaf that exists). The run directory is
the composition's own hydra.sweep.dir / hydra.sweep.subdir templates, evaluated with the job's values and its
override_dirname as Hydra builds it (get_overrides_dirname). A job this cannot reproduce exactly goes to Hydra itself
(compose.compose_many): an override that adds (+) or deletes (~) a key, one whose key is not a leaf of the config, a
value that is a list, a dict or an interpolation, an override of the `hydra` node beyond its sweeper and launcher,
a composition whose non-hydra part interpolates other keys, or a run-directory template of another form.
tests/config/test_jobs.py compares the two for every preset's jobs."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf, open_dict

from ffnbench.config.compose import CONF_DIR, compose_many, run_name
from ffnbench.errors import ConfigError

# hydra.* value overrides that change neither a run's config (the `hydra` node is not part of it) nor its directory
# (hydra.sweep.*, hydra.job.*): what the sweeper and the launcher are given
HYDRA_PASSIVE = ("hydra.sweeper", "hydra.launcher")


@dataclass(frozen=True)
class ResolvedJob:
    """One job as its run will see it.

    Attributes:
        overrides: the job's override list, as given.
        config: its resolved config without the `hydra` node (what the run stores as run_config.json, before the
            device and precision are resolved). Each job has its own copy.
        run_dir: hydra.sweep.dir / hydra.sweep.subdir, resolved.
    """

    overrides: tuple[str, ...]
    config: dict
    run_dir: Path


@dataclass(frozen=True)
class _Base:
    """One set of config groups, composed by Hydra and resolved once."""

    config: dict | None  # None: its non-hydra part interpolates other keys, so each job goes to Hydra
    sweep_dir: Callable[[Callable[[str], Any]], str] | None  # the directory templates, evaluated for a job's values
    subdir: Callable[[Callable[[str], Any]], str] | None
    exclude_keys: list[str]  # hydra.job.config.override_dirname's settings
    item_sep: str
    kv_sep: str


def resolve_jobs(override_lists: Iterable[Sequence[str]], cache: dict | None = None) -> list[ResolvedJob]:
    """Each override list's ResolvedJob, composed as `python -m ffnbench.train -m <overrides>` composes that job.

    Args:
        override_lists: the jobs.
        cache: a dict the caller keeps across calls (a sweep planned again after its tuning stage), so no set of
            groups is composed twice and no job resolved twice.
    Raises:
        ConfigError: one line, in Hydra's words, for a job Hydra cannot compose.
    """
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    cache = {} if cache is None else cache
    lists = [tuple(o) for o in override_lists]
    todo = [o for o in dict.fromkeys(lists) if ("resolved", o) not in cache]
    if todo:
        try:
            with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
                repo = GlobalHydra.instance().config_loader().repository
                slow: list[tuple[str, ...]] = []
                for overrides in todo:
                    job = _fast(overrides, repo, cache)
                    if job is None:
                        slow.append(overrides)
                    else:
                        cache["resolved", overrides] = job
        except (HydraException, OmegaConfBaseException) as e:
            raise ConfigError(" ".join(str(e).split("\nConfig search path")[0].split())) from None
        for overrides, cfg in zip(slow, compose_many([list(o) for o in slow], return_hydra_config=True, cache=cache)):
            run_dir = Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)
            with open_dict(cfg):
                del cfg["hydra"]  # runtime-only keys (output_dir) cannot be resolved outside a running job
            config = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
            cache["resolved", overrides] = ResolvedJob(overrides, config, run_dir)  # type: ignore[arg-type]
    out = []
    for o in lists:
        job = cache["resolved", o]
        out.append(ResolvedJob(job.overrides, _copy(job.config), job.run_dir))
    return out


def _parsed(line: str, cache: dict):
    """An override parsed once per process's cache (the grammar parser takes a millisecond or two a line)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    key = ("override", line)
    if key not in cache:
        cache[key] = OverridesParser.create().parse_override(line)
    return cache[key]


def _fast(overrides: tuple[str, ...], repo, cache: dict) -> ResolvedJob | None:
    """The job from its groups' resolved composition and its values; None where that would not be exactly Hydra's."""
    from hydra._internal.config_loader_impl import get_overrides_dirname

    parsed = [_parsed(line, cache) for line in overrides]
    if any(o.is_sweep_override() for o in parsed):
        return None

    def is_group(o) -> bool:
        key = ("group", o.key_or_group)
        if key not in cache:
            cache[key] = bool(repo.group_exists(o.key_or_group))
        return cache[key] and not isinstance(o.value(), dict)

    groups = [o for o in parsed if is_group(o)]
    values = [o for o in parsed if all(o is not g for g in groups)]
    settable = []
    for o in values:
        if o.is_hydra_override():
            if not o.key_or_group.startswith(HYDRA_PASSIVE) or o.is_delete() or o.is_add() or o.is_force_add():
                return None
            continue  # checked where the sweep's own config is composed (planning.sweep_config)
        value = o.value()
        if (o.package is not None or o.is_delete() or o.is_add() or o.is_force_add()
                or isinstance(value, dict | list) or (isinstance(value, str) and "${" in value)):
            return None
        settable.append((o.key_or_group.split("."), value))
    base = _base(tuple(o.input_line for o in groups), cache)
    if base.config is None or base.sweep_dir is None or base.subdir is None:
        return None
    config = _copy(base.config)
    for path, value in settable:
        node = config
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                return None  # not a key of the config: Hydra says so in its words
        if path[-1] not in node or isinstance(node[path[-1]], dict | list):
            return None
        node[path[-1]] = value
    dirname = get_overrides_dirname(overrides=[o for o in parsed if not o.is_hydra_override()],
                                    exclude_keys=base.exclude_keys, item_sep=base.item_sep, kv_sep=base.kv_sep)
    get = _lookup(config, {"hydra.job.override_dirname": dirname})
    try:
        run_dir = Path(base.sweep_dir(get)) / base.subdir(get)
    except KeyError:
        return None
    return ResolvedJob(overrides, config, run_dir)


def _base(groups: tuple[str, ...], cache: dict) -> _Base:
    """The composition of these config groups (Hydra's, with its `hydra` node), resolved once."""
    from hydra import compose as hydra_compose

    key = ("base", groups)
    if key in cache:
        return cache[key]
    cfg = hydra_compose(config_name="train", overrides=list(groups), return_hydra_config=True)
    hydra_node = cfg.hydra
    raw_sweep = OmegaConf.to_container(hydra_node.sweep, resolve=False)
    dirname = hydra_node.job.config.override_dirname
    with open_dict(cfg):
        del cfg["hydra"]
    raw = OmegaConf.to_container(cfg, resolve=False)
    # an interpolation of another key would have to be resolved after each job's values are set: Hydra does that
    config = None if _references_keys(raw) else OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    base = _Base(config, _template(str(raw_sweep["dir"])), _template(str(raw_sweep["subdir"])),
                 list(dirname.exclude_keys), str(dirname.item_sep), str(dirname.kv_sep))
    cache[key] = base
    return base


_REF = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")  # ${key}
_CALL = re.compile(r"\$\{run_name:((?:\$\{[A-Za-z_][\w.]*\},)*\$\{[A-Za-z_][\w.]*\})\}")  # ${run_name:${a},${b}}


def _references_keys(node: Any) -> bool:
    """Whether a config (unresolved) interpolates another of its keys: anything but the environment (oc.env)."""
    if isinstance(node, Mapping):
        return any(_references_keys(v) for v in node.values())
    if isinstance(node, list):
        return any(_references_keys(v) for v in node)
    return isinstance(node, str) and "${" in re.sub(r"\$\{oc\.env:[^${}]*(\$\{oc\.env:[^${}]*\})?[^${}]*\}", "", node)


def _template(text: str) -> Callable[[Callable[[str], Any]], str] | None:
    """A run-directory template (conf/train.yaml's hydra.sweep.dir and subdir) as a function of a lookup of keys:
    text with `${key}` references, or one `${run_name:${k1},...}` call; None for any other form (Hydra resolves it)."""
    call = _CALL.fullmatch(text)
    if call:
        keys = _REF.findall(call.group(1))
        return lambda get: str(run_name(*(get(k) for k in keys)))
    if "${" in _REF.sub("", text):
        return None
    return lambda get: _REF.sub(lambda m: str(get(m.group(1))), text)


def _lookup(config: dict, extra: Mapping[str, Any]) -> Callable[[str], Any]:
    def get(key: str) -> Any:
        if key in extra:
            return extra[key]
        node: Any = config
        for part in key.split("."):
            node = node[part]  # a KeyError: a template of a key this config lacks (Hydra says what it makes of it)
        return node

    return get


def _copy(node: Any) -> Any:
    """A plain config's deep copy (dicts, lists and immutable leaves): a few microseconds, where copy.deepcopy takes
    a hundred and OmegaConf's a few milliseconds."""
    if isinstance(node, dict):
        return {k: _copy(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_copy(v) for v in node]
    return node
