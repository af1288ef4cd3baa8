"""Sources (ffnbench.data.sources): local text files, Hugging Face datasets from a local copy or declared in one
YAML file, their rows as documents, and offline failures that say the fix."""

import json
import math
import random
import re

import pytest
from omegaconf import OmegaConf

import ffnbench.data.cache
import ffnbench.data.sources
from ffnbench.config.compose import compose
from ffnbench.data import (
    LMDataModule,
    data_config,
)
from ffnbench.errors import ConfigError, DataError

from .helpers import BASE, corpus_record, decode_split, document, make_dm, ready, text_folder


def test_text_files_on_a_folder_of_txt_and_md(tmp_path):
    docs = text_folder(tmp_path / "docs")
    dm = ready(make_dm(tmp_path, path=str(tmp_path / "docs")))
    record = corpus_record(dm)
    ids = record["splits"]["train"]["ids"] + record["splits"]["val"]["ids"]
    assert sorted(ids) == sorted(docs) and dm.info["val"]["docs"] >= 1
    assert decode_split(dm, "val") == "".join(docs[i] + "\n\n" for i in record["splits"]["val"]["ids"])


def test_text_files_on_a_jsonl(tmp_path):
    rng = random.Random(1)
    rows = [{"text": document(rng, 100)} for _ in range(6)] + [{"text": ""}]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    dm = ready(make_dm(tmp_path, path=str(tmp_path / "c.jsonl")))
    record = corpus_record(dm)
    assert record["dropped_empty_docs"] == 1
    assert dm.info["train"]["docs"] + dm.info["val"]["docs"] == 6
    assert all(re.fullmatch(r"c\.jsonl:\d", i) for i in record["splits"]["train"]["ids"])
    val = decode_split(dm, "val")
    assert val == "".join(rows[int(i[-1])]["text"] + "\n\n" for i in record["splits"]["val"]["ids"])


def source_cfg(source, **overrides):
    """A source's composed data config, with the small test settings on top."""
    composed = OmegaConf.to_container(compose([f"data={source}"]).data, resolve=True)
    return {**composed, **BASE, "source": source, "loader": composed["loader"], "max_docs": composed["max_docs"],
            **overrides}


def local_copy(rng):
    import datasets

    split = lambda n: datasets.Dataset.from_dict({"text": [document(rng, 80) for _ in range(n)], "extra": [0] * n})
    return datasets.DatasetDict({"train": split(6), "validation": split(3)})


@pytest.mark.parametrize("form", ["save_to_disk", "parquet"])
def test_a_hub_source_from_a_local_copy(tmp_path, form, no_network):
    copy = local_copy(random.Random(2))
    if form == "save_to_disk":
        copy.save_to_disk(str(tmp_path / "copy"))
    else:
        (tmp_path / "copy").mkdir()
        for name, ds in copy.items():
            ds.to_parquet(str(tmp_path / "copy" / f"{name}.parquet"))
    cfg = source_cfg("tinystories", path=str(tmp_path / "copy"), cache_dir=str(tmp_path / "cache"))
    dm = ready(LMDataModule(cfg, 16, 0))
    assert (dm.info["train"]["docs"], dm.info["val"]["docs"]) == (6, 3)  # the dataset's own splits
    assert decode_split(dm, "val") == "".join(t + "\n\n" for t in copy["validation"]["text"])
    assert corpus_record(dm)["split_rule"] == "the source's own splits"


HUB_YAML = """\
# A Hugging Face dataset declared in one file: no code.
source: tinyhub
loader: hub
hub_id: someone/tinyhub
hub_name: null
revision: null
streaming: false
text_field: story
id_field: null
splits: {train: train, val: validation}
documents: rows
"""


def outcome(result):
    """(status, final validation loss, data record) of train()'s RunResult."""
    return result.status, result.metrics["final_val_loss"], result.data


@pytest.mark.filterwarnings("ignore:.*LeafSpec")  # inside Lightning
def test_a_hub_dataset_added_with_one_yaml_file_trains(tmp_path, no_network):
    import datasets

    from ffnbench.train import train

    (tmp_path / "conf" / "data").mkdir(parents=True)
    (tmp_path / "conf" / "data" / "tinyhub.yaml").write_text(HUB_YAML)
    rng = random.Random(4)
    stories = lambda n: datasets.Dataset.from_dict({"story": [document(rng, 80) for _ in range(n)], "n": [0] * n})
    datasets.DatasetDict({"train": stories(6), "validation": stories(2)}).save_to_disk(str(tmp_path / "copy"))
    cfg = compose([f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "data=tinyhub", f"data.path={tmp_path / 'copy'}",
                   f"data.cache_dir={tmp_path / 'cache'}", f"run_dir={tmp_path / 'run'}", "model=micro",
                   "logger=csv", "trainer.accelerator=cpu", "trainer.max_steps=2", "trainer.val_every=2",
                   "trainer.progress_bar=false", "data.batch_size=4", "data.val_tokens=64"])
    assert data_config(cfg.data).loader == "hub" and cfg.data.text_field == "story"
    status, final_val_loss, data = outcome(train(cfg))
    assert status == "finished" and math.isfinite(final_val_loss)
    assert data["source"] == "tinyhub" and data["corpus"].startswith("tinyhub-")
    assert (data["train"]["docs"], data["val"]["docs"], data["val_windows"]) == (6, 2, 2)  # the copy's own splits


def test_wikitext_rows_become_articles(tmp_path):
    import datasets

    lines = lambda tag: ["", f" = Article {tag}1 = \n", "", f" text {tag}1 \n", " = = Section = = \n",
                         f" more {tag}1 \n", f" = Article {tag}2 = \n", f" text {tag}2 \n"]
    copy = datasets.DatasetDict({name: datasets.Dataset.from_dict({"text": lines(name)})
                                 for name in ("train", "validation")})
    copy.save_to_disk(str(tmp_path / "copy"))
    cfg = source_cfg("wikitext103", path=str(tmp_path / "copy"), cache_dir=str(tmp_path / "cache"))
    dm = ready(LMDataModule(cfg, 4, 0))
    assert (dm.info["train"]["docs"], dm.info["val"]["docs"]) == (2, 2)
    assert decode_split(dm, "val") == ("".join(lines("validation")[:6]) + "\n\n"
                                       + "".join(lines("validation")[6:]) + "\n\n")


def fineweb_rows(n):
    rng = random.Random(3)
    return {"id": [f"<urn:uuid:{i:04d}>" for i in range(n)], "text": [document(rng, 60) for _ in range(n)],
            "score": [3.5] * n}


def test_fineweb_hub_code_path_streams_max_docs_and_splits_by_id(tmp_path, monkeypatch):
    """The hub branch itself, with the Hub replaced by a stream of rows (the network is not reachable here)."""
    import datasets

    calls = []

    def load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return datasets.IterableDatasetDict({"train": datasets.Dataset.from_dict(fineweb_rows(40))
                                             .to_iterable_dataset()})

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(ffnbench.data.sources, "unreachable", lambda host, port=443: None)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    cfg = source_cfg("fineweb_edu", max_docs=25, cache_dir=str(tmp_path))
    dm = ready(LMDataModule(cfg, 8, 0))
    assert calls == [(("HuggingFaceFW/fineweb-edu", "sample-10BT"), {"revision": None, "streaming": True})]
    assert dm.info["train"]["docs"] + dm.info["val"]["docs"] == 25
    record = corpus_record(dm)
    ids = record["splits"]["val"]["ids"] + record["splits"]["train"]["ids"]
    assert sorted(ids) == fineweb_rows(25)["id"]  # the first 25 of the stream, split by their FineWeb ids
    with pytest.raises(ConfigError, match=r"data.max_docs: .* is streamed"):
        LMDataModule({**cfg, "max_docs": None, "cache_dir": str(tmp_path / "2")}, 8, 0).prepare_data()


def test_fineweb_from_a_local_jsonl_folder(tmp_path):
    (tmp_path / "copy").mkdir()
    rows = fineweb_rows(12)
    (tmp_path / "copy" / "train.jsonl").write_text(
        "".join(json.dumps(dict(zip(rows, values))) + "\n" for values in zip(*rows.values())))
    dm = ready(LMDataModule(source_cfg("fineweb_edu", path=str(tmp_path / "copy"), max_docs=10,
                                       cache_dir=str(tmp_path / "cache")), 8, 0))
    record = corpus_record(dm)
    assert sorted(record["splits"]["val"]["ids"] + record["splits"]["train"]["ids"]) == rows["id"][:10]
    assert record["split_rule"].startswith("lowest sha1(document id)")


@pytest.mark.parametrize("source", ["tinystories", "fineweb_edu"])
def test_a_hub_source_offline_fails_at_once_with_the_fix(tmp_path, monkeypatch, no_network, source):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("went on to load the dataset"))
    cfg = source_cfg(source, cache_dir=str(tmp_path))
    with pytest.raises(DataError) as e:
        LMDataModule(cfg, 16, 0).prepare_data()
    msg = str(e.value)
    for needle in (cfg["hub_id"], "unreachable", "data=shakespeare", "data.path=", "HF_DATASETS_OFFLINE=1"):
        assert needle in msg, needle


def test_hub_offline_mode_failure_is_wrapped(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # offline mode reads the HF cache and fails by itself: no network probe, one load attempt, its error wrapped
    monkeypatch.setattr(ffnbench.data.sources, "unreachable", lambda *a, **k: pytest.fail("probed the network"))
    calls, load_dataset = [], datasets.load_dataset
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: calls.append(a) or load_dataset(*a, **k))
    with pytest.raises(DataError, match=r"^data=tinystories: loading the dataset roneneldan/TinyStories failed "
                                        r"\(.*\)\. Use the offline default with data=shakespeare"):
        LMDataModule({**source_cfg("tinystories"), "cache_dir": str(tmp_path)}, 16, 0).prepare_data()
    assert calls == [("roneneldan/TinyStories", None)]


def test_gpt2_offline_fails_before_reading_the_corpus(tmp_path, monkeypatch, no_network):
    text_folder(tmp_path / "docs")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    monkeypatch.setattr(ffnbench.data.cache, "load_corpus", lambda cfg: pytest.fail("read the corpus first"))
    dm = make_dm(tmp_path, path=str(tmp_path / "docs"), tokenizer="gpt2")
    assert dm.vocab_size == 50257
    with pytest.raises(DataError, match=r"data.tokenizer=gpt2.*network.*TIKTOKEN_CACHE_DIR.*data.tokenizer=byte"):
        dm.prepare_data()
