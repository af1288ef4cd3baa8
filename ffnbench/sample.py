"""`ffnbench sample RUN_DIR [--prompt TEXT] [--tokens N] [--temperature T] [--seed S]` (also `python -m
ffnbench.sample`): what a trained run writes.

The weights are the run's checkpoint (rundir.last_checkpoint: checkpoints/last.ckpt, which a finished run writes
at its last step and an interrupted one holds at the step it saved); the model and the tokenizer are the run's own,
from its recorded resolved config (run_config.json) and the corpus's token cache (a BPE's tokenizer.json). Sampling
runs on the CPU, one token at a time over the last seq_len tokens, from a generator seeded by --seed: the same run,
prompt and settings give the same text. --temperature 0 takes the most likely token every time."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ffnbench.cli import user_errors_exit
from ffnbench.config.schema import run_spec
from ffnbench.data.cache import SEPARATOR
from ffnbench.data.tokenizer import Tokenizer, load_tokenizer, vocab_size_for
from ffnbench.errors import ConfigError, FFNBenchError, RunDirError
from ffnbench.fileio import CorruptRecord, read_json
from ffnbench.model.model import GPT
from ffnbench.runs.migrate import migrate_checkpoint, migrate_config
from ffnbench.runs.rundir import RUN_CONFIG_FILE, last_checkpoint

DEFAULT_PROMPT = SEPARATOR  # the corpus's document boundary: the model starts a text of its own


@dataclass
class Sampler:
    """A run's model (its checkpoint's weights, in eval mode, on the CPU) and tokenizer."""

    model: GPT
    tokenizer: Tokenizer
    step: int  # the optimizer step the checkpoint holds

    def encode(self, prompt: str) -> list[int]:
        """The prompt's tokens; a prompt the tokenizer cannot give back as it is (characters it does not know) or
        that holds no token is a ConfigError naming it."""
        if not prompt:
            raise ConfigError("--prompt: empty; give at least one character (the default is a newline)")
        ids = [int(i) for i in self.tokenizer.encode_batch([prompt])[0]]
        if not ids or self.tokenizer.decode(ids) != prompt:
            lost = sorted({c for c in prompt if self.tokenizer.decode(
                [int(i) for i in self.tokenizer.encode_batch([c])[0]]) != c})
            raise ConfigError(f"--prompt: the {self.tokenizer.id} tokenizer of this run cannot encode "
                              f"{', '.join(map(repr, lost)) or 'it'}; leave out those characters")
        if max(ids) >= self.model.cfg.vocab_size:
            raise ConfigError(f"--prompt: token {max(ids)} is outside this model's vocabulary "
                              f"({self.model.cfg.vocab_size}); the run's tokenizer files changed since it trained")
        return ids

    @torch.no_grad()
    def generate(self, ids: list[int], tokens: int, temperature: float, seed: int) -> list[int]:
        """`tokens` new tokens after `ids`, each drawn from the softmax of the logits / `temperature` (the most
        likely one at temperature 0), with a generator seeded by `seed`."""
        generator = torch.Generator().manual_seed(seed)
        context = torch.tensor([ids], dtype=torch.long)
        new: list[int] = []
        for _ in range(tokens):
            logits = self.model(context[:, -self.model.cfg.seq_len:])[0, -1].float()
            if temperature == 0:
                token = int(logits.argmax())
            else:
                # in float64 (a temperature below fp32's range would be 0) and shifted by the largest logit first:
                # a tiny temperature gives −inf for the rest, never inf − inf
                scaled = (logits.double() - logits.max().double()) / temperature
                token = int(torch.multinomial(torch.softmax(scaled, -1), 1, generator=generator))
            new.append(token)
            context = torch.cat([context, torch.tensor([[token]])], dim=1)
        return new


def load_sampler(run_dir: Path, cache_dir: Path | None = None) -> Sampler:
    """The model and tokenizer of the run in `run_dir` (its BPE tokenizer under `cache_dir` when given, else under the
    data.cache_dir the run recorded); a directory that is not a run, or one without a checkpoint yet, is a
    RunDirError saying so."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: no such run directory; give one that a run wrote (runs/<name>/<run>)")
    config_path, ckpt = run_dir / RUN_CONFIG_FILE, last_checkpoint(run_dir)
    if not config_path.exists():
        raise RunDirError(f"{run_dir}: not a run directory (no {RUN_CONFIG_FILE}); give one that a run wrote "
                          "(runs/<name>/<run>)")
    if not ckpt.exists():
        raise RunDirError(f"{run_dir}: no checkpoint yet ({ckpt}); a run saves one every trainer.ckpt_every steps "
                          "and when it ends: train it (further) first")
    try:
        config = migrate_config(read_json(config_path))
    except CorruptRecord as e:
        raise RunDirError(str(e)) from None
    spec = run_spec(config, vocab_size_for(config["data"]))
    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        migrate_checkpoint(state)
        weights = {k.removeprefix("model."): v for k, v in state["state_dict"].items() if k.startswith("model.")}
        model = GPT(spec.model, seed=spec.seed)
        model.load_state_dict(weights)
    except FFNBenchError:
        raise
    except Exception as e:
        raise RunDirError(f"{ckpt} cannot be read as this run's model ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''})") from None
    model.eval()
    from ffnbench.data.cache import token_dir
    from ffnbench.data.config import data_config

    data = {**config["data"], **({"cache_dir": str(cache_dir)} if cache_dir is not None else {})}
    tokenizer = load_tokenizer(data, token_dir(data_config(data)))
    return Sampler(model, tokenizer, int(state["global_step"]))


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _seed(text: str) -> int:
    value = int(text)
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**63), got {text}")
    return value


def _temperature(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ffnbench sample", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a run directory (runs/<name>/<run>)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT,
                        help="the text to continue (default: a document boundary, the corpus's blank line)")
    parser.add_argument("--tokens", type=_positive_int, default=200, help="tokens to generate (default 200)")
    parser.add_argument("--temperature", type=_temperature, default=0.8,
                        help="softmax temperature; 0 takes the most likely token (default 0.8)")
    parser.add_argument("--seed", type=_seed, default=0, help="the sampling generator's seed (default 0)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="where the run's BPE tokenizer is cached (default: the data.cache_dir it recorded; "
                             "give it for a run folder copied from another machine)")
    ns = parser.parse_args(sys.argv[1:] if argv is None else argv)
    sampler = load_sampler(ns.run_dir, ns.cache_dir)
    ids = sampler.encode(ns.prompt)
    new = sampler.generate(ids, ns.tokens, ns.temperature, ns.seed)
    print(f"ffnbench: {ns.run_dir.resolve().name}: step {sampler.step}, {ns.tokens} tokens, temperature "
          f"{ns.temperature:g}, seed {ns.seed}", file=sys.stderr)
    print(ns.prompt + sampler.tokenizer.decode(new))


if __name__ == "__main__":
    main()
