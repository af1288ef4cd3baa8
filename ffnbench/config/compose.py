"""Hydra composition: the config `python -m ffnbench.train <overrides>` runs with (compose, compose_many), the
check of a command line before Hydra runs it (check_overrides), and the resolvers conf/ uses: a run's directory
name (run_name) and the overrides it leaves out (NAME_EXCLUDE_KEYS)."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from ffnbench.config.identity import NON_IDENTITY_KEYS
from ffnbench.config.schema import ffn_spec
from ffnbench.errors import ConfigError
from ffnbench.placement import visible_gpu_count

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

# The overrides a run's directory name leaves out: the FFN and the seed (the name's label says them) and
# whatever does not change what a run computes (NON_IDENTITY_KEYS). Hydra reads this list through the
# `name_exclude_keys` resolver (conf/train.yaml: hydra.job.config.override_dirname.exclude_keys).
# trainer.compile (and its mode) stay in the name: it may resume an eager run, but asked for by name it is a run
# of its own. trainer.accelerator is part of a run's identity (as resolved: HARDWARE_KEYS) but not of its name:
# `auto` and what it resolves to name the same run, and a run of another device meets the directory and is
# refused there.
NAME_EXCLUDE_KEYS = ("seed", "experiment", "ffn", "ffn.act", "ffn.width", "ffn.budget", "ffn.bias",
                     "ffn.multiple_of", "ffn.approximate", "trainer", "trainer.accelerator",
                     *(k for k in NON_IDENTITY_KEYS if k not in ("trainer.compile", "trainer.compile_mode")),
                     # Hydra excludes exact keys: the blocks above by their settings, which a preset's grid may set
                     "lr_protocol.robust", "lr_protocol.min_lrs", "lr_protocol.min_seeds", "lr_protocol.bracket_cap",
                     "lr_protocol.judge_neighbours",
                     # the cluster a run is sent to (conf/train.yaml's slurm block), given per sweep in ARGS
                     *(f"slurm.{k}" for k in ("partition", "account", "qos", "timeout_min", "cpus_per_task", "mem_gb",
                                              "array_parallelism", "max_num_timeout")),
                     "instability.plateau_margin", "instability.plateau_after", "instability.spike_margin")
MAX_NAME_EXTRAS = 80  # longer override lists are replaced by a hash: file names have limits


def run_name(act, width, budget, bias, multiple_of, approximate, seed, override_dirname="") -> str:
    """The directory name of a run: what its FFN is, any other overrides, and its seed —
    e.g. `swiglu-b4-nobias-s0` or `gelu-w4-bias-optim.lr=0.003-s1`. Never a timestamp, so a rerun of the
    same sweep finds its runs again."""
    try:
        spec = ffn_spec({"act": act, "width": width, "budget": budget, "bias": bias,
                         "multiple_of": multiple_of, "approximate": approximate})
        label = spec.label
    except ConfigError:
        label = f"{act}-invalid"  # the run itself reports the error; the name only has to exist
    extras = _name_extras(str(override_dirname or ""))
    if len(extras) > MAX_NAME_EXTRAS:
        # a long data.path keeps its file's stem, with a hash of the whole path (two corpora of one name differ)
        shortened = _name_extras(_DATA_PATH.sub(_short_data_path, str(override_dirname)))
        digest = "o" + hashlib.blake2b(extras.encode(), digest_size=5).hexdigest()
        if len(shortened) <= MAX_NAME_EXTRAS and shortened != extras:
            extras = shortened
        else:
            stem = _DATA_PATH.search(str(override_dirname))
            extras = f"{_path_stem(stem.group(2))}-{digest}" if stem else digest
    return f"{label}{'-' + extras if extras else ''}-s{seed}"


# A data.path item of Hydra's override_dirname (`key=value` items joined by commas, sorted by key). Only a name whose
# overrides are too long to spell out (MAX_NAME_EXTRAS) changes with it: the names of all other runs stay as they were.
_DATA_PATH = re.compile(r"(^|,)data\.path=([^,]*)")


def _name_extras(override_dirname: str) -> str:
    return override_dirname.replace("/", "_").replace(",", "-").replace(" ", "")


def _path_stem(path: str) -> str:
    """A corpus path's file (or folder) name without its suffix, in characters a directory name keeps."""
    stem = Path(path.rstrip("/") or "root").stem
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", stem)[:40] or "data"


def _short_data_path(match: re.Match) -> str:
    path = match.group(2)
    return f"{match.group(1)}data.path={_path_stem(path)}-{hashlib.blake2b(path.encode(), digest_size=3).hexdigest()}"


def config_groups() -> str:
    """The config groups of conf/ and their options, one `group: a, b, c` line each, as Hydra's --help lists them,
    less Hydra's own groups and the files whose name starts with `_` (bases that presets build on, not options:
    conf/experiment/_gpu.yaml)."""
    lines = []
    for group in sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra"):
        options = sorted(f.stem for f in group.glob("*.yaml") if not f.stem.startswith("_"))
        if options:
            lines.append(f"{group.name}: {', '.join(options)}")
    return "\n".join(lines)


def register_resolvers() -> None:
    """The resolvers conf/ uses, registered once per process (importing this module does it)."""
    if not OmegaConf.has_resolver("visible_gpus"):  # conf/hydra/launcher/local.yaml: the GPUs of this machine
        OmegaConf.register_new_resolver("visible_gpus", visible_gpu_count)
    if not OmegaConf.has_resolver("run_name"):
        OmegaConf.register_new_resolver("run_name", run_name)
    if not OmegaConf.has_resolver("config_groups"):  # conf/train.yaml: hydra.help.template
        OmegaConf.register_new_resolver("config_groups", config_groups)
    if not OmegaConf.has_resolver("name_exclude_keys"):
        OmegaConf.register_new_resolver("name_exclude_keys", lambda: list(NAME_EXCLUDE_KEYS))


register_resolvers()


def compose(overrides: Sequence[str] = (), config_name: str = "train", return_hydra_config: bool = False) -> DictConfig:
    """The config `python -m ffnbench.train <overrides>` would run with (with `return_hydra_config`, also its
    `hydra` node: run and sweep directories, launcher, sweeper)."""
    return compose_many([overrides], config_name, return_hydra_config)[0]


def compose_many(override_lists: Iterable[Sequence[str]], config_name: str = "train",
                 return_hydra_config: bool = False, cache: dict | None = None) -> list[DictConfig]:
    """`compose` for many override lists (a sweep's jobs), with one Hydra initialisation for all of them.

    Jobs that select the same config groups (ffn=..., model=..., experiment=...) differ only in value overrides
    (seed=..., optim.lr=...), which Hydra applies after it has merged the groups: those groups are composed once and
    each job's values applied to a copy, the way Hydra applies them (ConfigLoaderImpl._apply_overrides_to_config),
    with the `hydra` node's override lists and override_dirname rebuilt as Hydra builds them. A sweep of hundreds of
    jobs then composes a few dozen times, not hundreds (a composition takes a Hydra second or so); a job this path
    cannot reproduce exactly (a sweep, an override of what Hydra reads after the values: HYDRA_READS, the
    whole `hydra` node; or any error) is composed by Hydra itself.

    `cache`: a dict the caller keeps, to compose an override list it has composed before only once (a sweep plans
    its jobs again after the lr-tuning stage). Each call gets a copy."""
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    cache = {} if cache is None else cache
    lists = [tuple(overrides) for overrides in override_lists]
    try:
        todo = [o for o in dict.fromkeys(lists) if (config_name, return_hydra_config, o) not in cache]
        if todo:
            with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
                for overrides in todo:
                    cache[config_name, return_hydra_config, overrides] = _compose_job(
                        list(overrides), config_name, return_hydra_config, cache)
        return [copy.deepcopy(cache[config_name, return_hydra_config, o]) for o in lists]
    except (HydraException, OmegaConfBaseException) as e:
        # One line: Hydra's message spans several (the options of a group, the search path).
        raise ConfigError(" ".join(str(e).split("\nConfig search path")[0].split())) from None


HYDRA_READS = ("hydra.job", "hydra.searchpath", "hydra.runtime", "hydra.overrides")


def _compose_job(overrides: list[str], config_name: str, return_hydra_config: bool, cache: dict) -> DictConfig:
    """One job's config, from the composition of its config groups (cached) and its value overrides; what
    `hydra.compose` returns for it (tests/config/test_compose.py compares the two for every preset's jobs)."""
    from hydra import compose as hydra_compose
    from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    def by_hydra() -> DictConfig:
        return hydra_compose(config_name=config_name, overrides=overrides, return_hydra_config=return_hydra_config)

    parsed = OverridesParser.create().parse_overrides(overrides)
    repo = GlobalHydra.instance().config_loader().repository
    # Hydra's own split (hydra._internal.defaults_list.Overrides): a group override selects configs, the rest set values
    groups = [o for o in parsed if repo.group_exists(o.key_or_group) and not isinstance(o.value(), dict)]
    values = [o for o in parsed if all(o is not g for g in groups)]
    # what Hydra reads or writes after applying the values (hydra.job: env_copy, the override_dirname settings;
    # hydra.runtime, hydra.overrides; the whole hydra node) or before it composes (hydra.searchpath), and sweeps:
    # those jobs go the long way
    if any(o.is_sweep_override() or o.key_or_group == "hydra" or o.key_or_group.startswith(HYDRA_READS)
           for o in parsed):
        return by_hydra()
    key = ("groups", config_name, tuple(o.input_line for o in groups))
    if key not in cache:
        cache[key] = hydra_compose(config_name=config_name, overrides=[o.input_line for o in groups],
                                   return_hydra_config=True)
    cfg = copy.deepcopy(cache[key])
    try:
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        lists = cfg.hydra.overrides
        for name, hydra_side in (("task", False), ("hydra", True)):
            given = [o.input_line for o in parsed if o.is_hydra_override() == hydra_side]
            before = len(lists[name]) - sum(o.is_hydra_override() == hydra_side for o in groups)
            lists[name] = [*list(lists[name])[:before], *given]
        dirname = cfg.hydra.job.config.override_dirname
        cfg.hydra.job.override_dirname = get_overrides_dirname(
            overrides=[o for o in parsed if not o.is_hydra_override()], kv_sep=dirname.kv_sep,
            item_sep=dirname.item_sep, exclude_keys=dirname.exclude_keys)
    except Exception:  # Hydra itself says what is wrong, in its own words
        return by_hydra()
    if not return_hydra_config:
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg


MULTIRUN_FLAGS = ("-m", "--multirun")


def check_overrides(args: Sequence[str]) -> list[DictConfig]:
    """Compose the command line of `python -m ffnbench.train [-m] <overrides>` as Hydra will, so that an override
    Hydra cannot apply (an unknown option of a config group, a key that does not exist, a typo in the syntax)
    is a one-line ConfigError before Hydra prints its own multi-line one. With -m, each value of a sweep override
    is composed with the other (fixed) overrides. A command line with Hydra's other flags (--help, --cfg, -cn,
    ...) is left to Hydra. Returns the configs composed (with their `hydra` node; none when left to Hydra)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in args):
        return []
    overrides = [a for a in args if a not in MULTIRUN_FLAGS]
    if not any(a in MULTIRUN_FLAGS for a in args):
        return [compose(overrides, return_hydra_config=True)]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        raise ConfigError(" ".join(str(e).split())) from None
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    jobs = [fixed]
    for o in parsed:
        if o.is_choice_sweep() or o.is_range_sweep():  # a glob's options are known to Hydra's loader only
            jobs += [[*fixed, f"{o.get_key_element()}={v}"] for v in o.sweep_string_iterator()]
    return compose_many(jobs, return_hydra_config=True)
