"""What the training tests share (tests/test_train.py, tests/integration/): the micro run's settings, callbacks
that record a run's batches and stop it, and the command line with hooks loaded into its processes."""

import os
import subprocess
import sys
import textwrap

import lightning as L

from ffnbench.config.compose import compose

MICRO = [
    "model=micro",
    "logger=csv",
    "data.batch_size=8",
    "data.val_tokens=1024",
    "data.final_val_tokens=4096",
    "trainer.max_steps=40",
    "trainer.val_every=10",
    "trainer.ckpt_every=10",
    "trainer.log_every=5",
    "trainer.progress_bar=false",
    "trainer.accelerator=cpu",
]


def micro(cache_dir, run_dir, *extra):
    return compose([*MICRO, f"data.cache_dir={cache_dir}", f"run_dir={run_dir}", *extra])


class RecordBatches(L.Callback):
    """The token rows of every training batch, by optimizer step."""

    def __init__(self):
        self.rows: dict[int, list[tuple[int, ...]]] = {}

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        for i, x in enumerate(batch[0].tolist()):  # a batch stacks the batches of trainer.inner_steps steps
            if trainer.global_step + i < trainer.max_steps:  # the run's last batch may hold steps it never takes
                self.rows[trainer.global_step + i] = [tuple(row) for row in x]


class StopAt(L.Callback):
    def __init__(self, step: int, error: type[BaseException] = RuntimeError):
        self.step, self.error = step, error

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step:
            raise self.error(f"stopped at step {self.step}")


def run_cli(*args, cwd=None, env=None):
    env = {**os.environ, "WANDB_MODE": "offline", **(env or {})}
    return subprocess.run([sys.executable, "-m", "ffnbench.train", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


# Appended to a hook's source: every Trainer the process builds gets the hook's callback `_Hook` besides its own.
ADD_HOOK_CALLBACK = """
_init = L.Trainer.__init__

def _with_hook(self, *args, callbacks=None, **kwargs):
    _init(self, *args, callbacks=[*(callbacks or []), _Hook()], **kwargs)

L.Trainer.__init__ = _with_hook
"""


def hook_pythonpath(tmp_path, source: str) -> str:
    """The PYTHONPATH of a child process that loads `source` (which defines the callback `_Hook`) as its
    sitecustomize, with its Trainers patched to use that callback."""
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(textwrap.dedent(source) + ADD_HOOK_CALLBACK)
    return os.pathsep.join([str(tmp_path / "hook"), *filter(None, [os.environ.get("PYTHONPATH")])])
