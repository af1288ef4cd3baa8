"""LMDataModule: the corpus of `cfg.data` as Lightning sees it: prepare (the token cache, once per node), set up
(memory-map it, after the size checks), and the two dataloaders."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig

from ffnbench.data.batches import TokenWindows, TrainBatches, ValBatches, check_windows, val_window_offsets
from ffnbench.data.cache import TOKEN_BYTES_FILE, cached_metas, prepare_corpus, token_dir, train_unigram_loss
from ffnbench.data.config import DataConfig, data_config
from ffnbench.data.corpus import SPLITS
from ffnbench.data.tokenizer import tokenizer_id, vocab_size_for
from ffnbench.errors import DataError


class LMDataModule(L.LightningDataModule):
    """The corpus of `data_cfg` for a model with context `seq_len`; `seed` fixes the order of training batches.

    Construction checks the config (ConfigError naming the field); prepare_data() builds the token cache (once per
    node); setup() checks that the windows fit the corpus, then memory-maps it. Then: `vocab_size`,
    `train_tokens` / `val_tokens` (memmaps), `val_bytes_per_token`, `info`, and the two dataloaders. A training
    batch holds the batches of `inner_steps` optimizer steps, stacked (batches.TrainBatches)."""

    def __init__(self, data_cfg: DataConfig | Mapping | DictConfig, seq_len: int, seed: int, inner_steps: int = 1):
        super().__init__()
        self.inner_steps = int(inner_steps)  # optimizer steps per training batch (trainer.inner_steps, resolved)
        self.config = data_config(data_cfg)
        check_windows(self.config, seq_len)
        self.seq_len, self.seed = int(seq_len), int(seed)
        self.vocab_size = vocab_size_for(self.config.as_dict())
        self.batch_size = self.config.batch_size
        self.info: dict[str, Any] = {}
        self.unigram_loss: float | None = None
        self.train_tokens: np.ndarray | None = None
        self.val_tokens: np.ndarray | None = None
        self.val_bytes_per_token: float | None = None
        self.val_offsets: np.ndarray | None = None
        self.final_val_offsets: np.ndarray | None = None  # data.final_val_tokens' windows, capped at the split
        self.final_val_bytes_per_token: float | None = None
        # Set for the final validation (fit.py, after fit): the dataloader then serves the periodic windows and,
        # after them, the final set's, marked (batches.FINAL_MARK).
        self.final = False
        self._token_dir: Path | None = None
        self._prepared: dict[str, Any] = {}

    @property
    def token_dir(self) -> Path:
        if self._token_dir is None:
            self._token_dir = token_dir(self.config)
        return self._token_dir

    def prepare_data(self) -> None:
        if self._prepared:  # Lightning calls this again in each fit/validate; the cache was verified already
            return
        start = time.perf_counter()
        self._token_dir, _, from_cache = prepare_corpus(self.config)
        self._prepared = {"from_cache": from_cache, "seconds": time.perf_counter() - start}

    def setup(self, stage: str | None = None) -> None:
        """Check the sizes (a ConfigError when a window or the validation set does not fit the corpus), then
        memory-map the token files and fix the validation windows."""
        start = time.perf_counter()
        metas, problems = cached_metas(self.token_dir, verify=False)
        if metas is None:
            raise DataError(f"no usable token cache at {self.token_dir} ({'; '.join(problems) or 'not built'}): "
                            f"call prepare_data() first, or run python -m ffnbench.data with the same overrides")
        check_windows(self.config, self.seq_len, self._world()[0], {s: metas[s]["n_tokens"] for s in SPLITS})
        self.train_tokens, self.val_tokens = (np.memmap(self.token_dir / f"{split}.bin", mode="r",
                                                        dtype=metas[split]["dtype"]) for split in SPLITS)
        self.val_offsets = val_window_offsets(len(self.val_tokens), self.seq_len, self.config.val_tokens)
        self.final_val_offsets = val_window_offsets(len(self.val_tokens), self.seq_len,
                                                    self.config.final_val_tokens or self.config.val_tokens)
        token_bytes = np.load(self.token_dir / TOKEN_BYTES_FILE)
        self.val_bytes_per_token, self.final_val_bytes_per_token = (
            float(token_bytes[TokenWindows(self.val_tokens, self.seq_len)(offsets)[1].numpy()].mean())
            for offsets in (self.val_offsets, self.final_val_offsets))
        self.unigram_loss = train_unigram_loss(self.token_dir, self.train_tokens, self.vocab_size, metas["train"])
        seconds = self._prepared.get("seconds", 0.0) + time.perf_counter() - start
        self.info = self._describe(metas, seconds)

    def _describe(self, metas: dict[str, dict], seconds: float) -> dict[str, Any]:
        return {
            "source": self.config.source,
            "corpus": self.token_dir.parent.name,
            "content_hash": metas["train"].get("content_hash"),
            "revision": self.config.revision,
            "tokenizer": self.token_dir.name,
            "tokenizer_hash": metas["train"].get("tokenizer_hash"),
            "vocab_size": self.vocab_size,
            **{split: {"docs": metas[split]["n_docs"], "bytes": metas[split]["n_bytes"],
                       "tokens": metas[split]["n_tokens"]} for split in SPLITS},
            "val_windows": len(self.val_offsets),
            "val_bytes_per_token": self.val_bytes_per_token,
            "final_val_windows": len(self.final_val_offsets),
            "final_val_bytes_per_token": self.final_val_bytes_per_token,
            "unigram_loss": self.unigram_loss,  # nats/token of the training split: what a plateau stays near
            "cache_dir": str(self.token_dir),
            "from_cache": self._prepared.get("from_cache"),  # None on a rank that did not prepare
            "seconds": seconds,
        }

    def _pin_memory(self) -> bool:
        """Page-locked batches when training on a GPU: only a copy from pinned memory is asynchronous; from pageable
        memory torch waits for the GPU's queue to drain before every batch (a host-device sync per step)."""
        device = getattr(getattr(self.trainer, "strategy", None), "root_device", None)
        return getattr(device, "type", None) == "cuda"

    def _world(self) -> tuple[int, int]:
        """(world size, rank), from the trainer when one is attached."""
        trainer = self.trainer
        return (int(trainer.world_size), int(trainer.global_rank)) if trainer is not None else (1, 0)

    def local_batch_size(self) -> int:
        world, _ = self._world()
        check_windows(self.config, self.seq_len, world)
        return self.batch_size // world

    def _windows(self, tokens: np.ndarray | None) -> TokenWindows:
        if tokens is None:
            raise DataError("LMDataModule: call prepare_data() and setup() before asking for batches")
        return TokenWindows(tokens, self.seq_len)

    def train_dataloader(self) -> TrainBatches:
        """Endless batches, from the step a resumed trainer left off at. The stream itself, not a DataLoader around
        it: a batch is made in the training process anyway (a few index operations on the memory-mapped tokens),
        and a DataLoader would add its bookkeeping and a profiler record to every step."""
        world, rank = self._world()
        self.local_batch_size()
        trainer = self.trainer
        start = int(trainer.global_step) if trainer is not None else 0
        return TrainBatches(self._windows(self.train_tokens), self.seed, self.batch_size, world, rank, start,
                            pin=self._pin_memory(), group=self.inner_steps)

    def val_dataloader(self) -> torch.utils.data.DataLoader:
        """This rank's contiguous share of the fixed validation windows, in order; with `final`, then its share of
        the final set's windows (marked)."""
        world, rank = self._world()
        windows = self._windows(self.val_tokens)
        local = self.local_batch_size()
        dataset = ValBatches(windows, np.array_split(self.val_offsets, world)[rank], local)
        if self.final:
            final = ValBatches(windows, np.array_split(self.final_val_offsets, world)[rank], local, final=True)
            dataset = torch.utils.data.ConcatDataset([dataset, final])
        return torch.utils.data.DataLoader(dataset, batch_size=None, shuffle=False, num_workers=0,
                                           pin_memory=self._pin_memory())

    def transfer_batch_to_device(self, batch: list, device: torch.device, dataloader_idx: int) -> list:
        """A batch to the device: its tensors, and a final validation batch's marker as it is. Lightning's default
        walks a batch as an arbitrary collection, dozens of Python calls per training step; ours is a flat list."""
        non_blocking = device.type == "cuda"  # from pinned memory (_pin_memory), as Lightning's default does
        return [t.to(device, non_blocking=non_blocking) if isinstance(t, torch.Tensor) else t for t in batch]

    def state_dict(self) -> dict[str, Any]:
        """What identifies the data a checkpoint was trained on."""
        return {"source": self.config.source, "corpus": self.info.get("corpus"),
                "content_hash": self.info.get("content_hash"), "tokenizer": tokenizer_id(self.config.as_dict()),
                "tokenizer_hash": self.info.get("tokenizer_hash"), "seed": self.seed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        ours = self.state_dict()
        differ = {k: (v, ours[k]) for k, v in state_dict.items() if ours.get(k) is not None and v != ours[k]}
        if differ:
            warnings.warn(f"the checkpoint was trained on other data than this run's: "
                          f"{', '.join(f'{k} {a!r} -> {b!r}' for k, (a, b) in differ.items())}", stacklevel=2)
