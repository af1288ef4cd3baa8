"""The batches a run sees: seeded training windows (a pure function of seed and batch number, so every FFN
variant, device count and resumed run sees the same ones), the fixed validation windows, and the size checks
that must pass before any of them is gathered."""

from __future__ import annotations

import atexit
import hashlib
import math
import queue
import threading
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from ffnbench.data.config import DataConfig
from ffnbench.data.corpus import SPLITS
from ffnbench.errors import ConfigError, DataError


def check_windows(config: DataConfig, seq_len: int, world_size: int = 1,
                  split_tokens: Mapping[str, int] | None = None) -> None:
    """Raise a ConfigError naming the field and the fix when the batches of a run cannot be made. From the config
    alone: a positive model.seq_len, a validation set of at least one window, a global batch that splits across
    `world_size` devices. With `split_tokens` (the train/val sizes of the prepared token cache, cheap to have):
    a window of seq_len + 1 tokens fits in each split, and the validation split holds data.val_tokens in windows
    side by side. Call it before anything the size of a batch is allocated."""
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
        raise ConfigError(f"model.seq_len: expected a positive integer, got {seq_len!r}")
    if config.val_tokens < seq_len:
        raise ConfigError(f"data.val_tokens={config.val_tokens}: less than one validation window of "
                          f"model.seq_len={seq_len} tokens; raise data.val_tokens to at least {seq_len} or use a "
                          f"smaller model.seq_len")
    final = config.final_val_tokens
    if final is not None and final < seq_len:
        raise ConfigError(f"data.final_val_tokens={final}: less than one validation window of model.seq_len="
                          f"{seq_len} tokens; raise it to at least {seq_len}, or null for data.val_tokens")
    if config.batch_size % world_size:
        raise ConfigError(f"data.batch_size={config.batch_size} does not split evenly across {world_size} devices; "
                          f"use a multiple of {world_size}")
    if split_tokens is None:
        return
    for split in SPLITS:
        if (n := split_tokens[split]) < seq_len + 1:
            raise ConfigError(f"model.seq_len={seq_len}: a window of {seq_len + 1:,} tokens is longer than the "
                              f"{split} split of data={config.source} ({n:,} tokens); use a smaller model.seq_len "
                              f"or a larger corpus")
    side_by_side = (split_tokens["val"] - 1) // seq_len
    if side_by_side < config.val_tokens // seq_len:
        raise ConfigError(f"data.val_tokens={config.val_tokens}: the val split of data={config.source} "
                          f"({split_tokens['val']:,} tokens) holds {side_by_side:,} windows of model.seq_len={seq_len}"
                          f", fewer than the {config.val_tokens // seq_len:,} asked; use data.val_tokens<="
                          f"{side_by_side * seq_len} or a larger corpus")


def _batch_seed(seed: int, batch_index: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"ffnbench/{seed}/{batch_index}".encode(), digest_size=8).digest(),
                          "little") >> 1  # torch seeds are < 2**63


def window_offsets(seed: int, batch_index: int, batch_size: int, n_tokens: int, seq_len: int) -> torch.Tensor:
    """Start offsets of the `batch_size` training windows of global batch number `batch_index`: a pure function
    of its arguments, so every FFN variant, device count and resumed run sees the same batches."""
    if n_tokens < seq_len + 1:
        raise DataError(f"{n_tokens:,} tokens hold no window of seq_len={seq_len} + 1")
    generator = torch.Generator().manual_seed(_batch_seed(seed, batch_index))
    return torch.randint(0, n_tokens - seq_len, (batch_size,), generator=generator)


def val_window_offsets(n_tokens: int, seq_len: int, val_tokens: int) -> np.ndarray:
    """The fixed validation set: val_tokens // seq_len windows (at least one, and no more than fit side by side),
    evenly spaced over the validation split; independent of the seed (and of the FFN: window i of two runs
    on the same data and seq_len is the same text, so per-window losses pair across runs)."""
    n = max(1, min(val_tokens // seq_len, (n_tokens - 1) // seq_len))
    return np.linspace(0, n_tokens - seq_len - 1, n).astype(np.int64)


class TokenWindows:
    """(x, y) windows of a token array, y = x shifted by one, gathered with one vectorised index on a torch view
    of the memmap (no copy of the corpus). The ids are viewed as signed ints and masked back, since older torch
    versions cannot index uint16/uint32 tensors."""

    def __init__(self, tokens: np.ndarray, seq_len: int):
        self.tokens, self.seq_len = tokens, seq_len
        with warnings.catch_warnings():  # a read-only memmap: nothing ever writes through this view
            warnings.simplefilter("ignore", UserWarning)
            self._view = torch.from_numpy(tokens.view(np.int16 if tokens.itemsize == 2 else np.int32))
        self._mask = (1 << (8 * tokens.itemsize)) - 1
        self._span = torch.arange(seq_len + 1)

    def __call__(self, offsets: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        windows = self._view[torch.as_tensor(offsets)[:, None] + self._span].long() & self._mask
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


class TrainBatches(torch.utils.data.IterableDataset):
    """The endless stream of training batches from batch number `start` on; this rank's contiguous slice of each
    global batch, in page-locked memory with `pin` (for a GPU: only a copy from pinned memory is asynchronous).

    With `group` > 1 each item holds the batches of up to `group` consecutive optimizer steps, stacked ([k, local
    batch, seq_len] each), cut at multiples of `group` (steps 0…group−1, group…2·group−1, ...; a stream that starts
    mid-group, as a run resumed from an interrupted step does, first finishes that group): the training module takes
    one optimizer step per batch in the stack (trainer.inner_steps)."""

    def __init__(self, windows: TokenWindows, seed: int, batch_size: int, world_size: int = 1, rank: int = 0,
                 start: int = 0, pin: bool = False, group: int = 1, prefetch: bool | None = None):
        self.windows, self.seed, self.batch_size, self.start = windows, seed, batch_size, start
        self.local = batch_size // world_size
        self.rank, self.pin, self.group = rank, pin, group
        # a GPU run (pinned batches) builds and pins the next item on a thread while the device trains on this one,
        # instead of on the main thread right after the logging step's host sync; the items are the same, in order
        self.prefetch = pin if prefetch is None else prefetch

    def batch(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        offsets = window_offsets(self.seed, i, self.batch_size, len(self.windows.tokens), self.windows.seq_len)
        return self.windows(offsets[self.rank * self.local:(self.rank + 1) * self.local])

    def __iter__(self) -> Iterator[list[torch.Tensor]]:
        return _prefetched(self._items()) if self.prefetch else self._items()

    def _items(self) -> Iterator[list[torch.Tensor]]:
        i = self.start
        while True:
            end = (i // self.group + 1) * self.group
            xs, ys = zip(*(self.batch(j) for j in range(i, end)), strict=True)
            x, y = torch.stack(xs), torch.stack(ys)
            yield [x.pin_memory(), y.pin_memory()] if self.pin else [x, y]
            i = end


# The producer threads of the streams still open: stopped and joined at interpreter exit (_stop_producers).
_PRODUCERS: set[tuple[threading.Event, threading.Thread]] = set()


@atexit.register
def _stop_producers() -> None:
    """At interpreter exit, stop every producer thread and wait for it. A daemon thread still running when the
    interpreter finalizes is killed where it next takes the GIL: inside torch's C++ code (building a batch), that
    unwinds through frames that cannot unwind and aborts the process ("terminate called without an active exception",
    exit 134). atexit callbacks run before daemon threads are killed; a producer finishes the item it is building and
    returns (within that item's time plus one put timeout)."""
    open_ = list(_PRODUCERS)
    for stop, _ in open_:
        stop.set()
    for _, thread in open_:
        thread.join(timeout=60)


def _prefetched(items: Iterator, depth: int = 1) -> Iterator:
    """`items`, produced on a background thread up to `depth` ahead of the consumer. The thread stops when the
    consumer drops or closes this iterator (the end of a run), or when the interpreter exits with it still open
    (_stop_producers): it never outlives the stream by more than a put."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    failed: list[BaseException] = []

    def offer(item: Any) -> bool:
        """Put `item` in the queue once there is room; False when the stream was stopped first."""
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
        except BaseException as e:  # handed to the consumer, raised where it asks for the next item
            failed.append(e)
            offer(None)
        finally:
            _PRODUCERS.discard(entry)

    thread = threading.Thread(target=produce, name="ffnbench-prefetch", daemon=True)
    entry = (stop, thread)
    _PRODUCERS.add(entry)
    thread.start()
    try:
        while True:
            item = ready.get()
            if failed:
                raise failed[0]
            yield item
    finally:
        stop.set()


class ValBatches(torch.utils.data.Dataset):
    """Fixed validation windows in batches (map-style: batch b is item b). Batches of the final validation set
    (`final`) carry a third element, a marker, so the training module can tell them from the periodic set's."""

    def __init__(self, windows: TokenWindows, offsets: np.ndarray, batch_size: int, final: bool = False):
        self.windows, self.offsets, self.batch_size, self.final = windows, offsets, batch_size, final

    def __len__(self) -> int:
        return math.ceil(len(self.offsets) / self.batch_size)

    def __getitem__(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= b < len(self):
            raise IndexError(b)
        x, y = self.windows(self.offsets[b * self.batch_size:(b + 1) * self.batch_size])
        return (x, y, FINAL_MARK) if self.final else (x, y)


FINAL_MARK = "final"  # the third element of a final validation batch
