"""What the data tests share: the small data settings, and corpora and data modules built from them."""

import json
import random
from types import SimpleNamespace

import numpy as np

from ffnbench.data import LMDataModule
from ffnbench.data.tokenizer import ByteTokenizer

BASE = {"source": "text_files", "loader": "files", "path": None, "tokenizer": "byte", "vocab_size": 300,
        "batch_size": 4, "val_tokens": 64, "val_fraction": 0.2, "max_docs": None, "num_proc": None}
WORDS = ["the", "of", "and", "to", "a", "in", "that", "is", "was", "he", "for", "it", "naïve", "café", "—", "日本"]


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
