"""A run's directory: where it is, what a (re)start does with it, who is training it now, and clearing up after a
refused start.

One directory per run, named for what the run computes (config.compose.run_name), so a rerun finds it again. What
train() does there is decided here, ahead of any work, and `make sweep`'s dry run makes the same decision:
skip a finished run, resume an interrupted one from checkpoints/last.ckpt, start a fresh one, and refuse a
directory that holds a different config. While a run trains, its process holds a lock on the directory (RunLock),
so that a second launch of the same run (a rerun of a sweep whose jobs still run) is told where it runs and
skips it. The names of the files a run directory and a sweep directory hold are here. This module does not import
Lightning (the sweep planner imports it), and reads a checkpoint with torch only when there is one."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from ffnbench.config.identity import NON_IDENTITY_KEYS, identity_diff
from ffnbench.errors import ConfigError, RunDirError
from ffnbench.fileio import CorruptRecord, read_json
from ffnbench.runs.migrate import migrate_checkpoint, migrate_config
from ffnbench.runs.result import FINAL_STATUSES, RunResult

RUN_CONFIG_FILE = "run_config.json"  # the run's resolved config, written before it trains
CKPT_DIR = "checkpoints"
RUN_LOCK = ".running"  # locked by the process training the run; says which process that is
LAST_CKPT = "last.ckpt"
HYDRA_FILES = {".hydra": {"config.yaml", "hydra.yaml", "overrides.yaml"}}  # what Hydra writes before a job
# In a sweep's directory, above its runs: the sweep's command and its run directories (written by ffnbench.sweep,
# read by the progress estimate and the report).
SWEEP_MANIFEST = "sweep.json"


def resolve_run_dir(cfg: DictConfig) -> Path:
    """`run_dir` when set, else the directory Hydra made for this job."""
    if cfg.get("run_dir"):
        return Path(cfg.run_dir).expanduser().resolve()
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir).resolve()
    raise ConfigError("run_dir: not set; pass run_dir=<dir> when calling train() outside the Hydra entry point")


def check_writable(directory: Path, setting: str) -> None:
    """A ConfigError naming `setting` (the override that chose `directory`, or `key=value`) when `directory` cannot
    be made or written: a file stands where a folder of its path should be, or its nearest existing folder refuses a new
    entry (no permission, a read-only or virtual file system such as /proc). Checked by making an empty folder
    there and removing it again, so nothing is left behind."""
    directory = Path(directory).absolute()  # as the caller will use it: Hydra does not expand ~ in its folders
    existing = next(p for p in (directory, *directory.parents) if p.exists() or p.is_symlink())
    fix = f"set {setting.split('=')[0]}=<a folder you can write>"
    if existing.is_symlink() and not existing.exists():
        raise ConfigError(f"{setting}: {existing} is a link to nothing ({os.readlink(existing)}), so {directory} "
                          f"cannot be made; {fix}")
    if not existing.is_dir():
        raise ConfigError(f"{setting}: {existing} is a file, not a folder, so {directory} cannot be made; {fix}")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".ffnbench-probe-", dir=existing))
    except OSError as e:
        raise ConfigError(f"{setting}: cannot write in {existing} ({e.strerror or e}), so {directory} cannot be "
                          f"made; {fix}") from None


def last_checkpoint(run_dir: Path) -> Path:
    return Path(run_dir) / CKPT_DIR / LAST_CKPT


@dataclass(frozen=True)
class RunPlan:
    action: str  # "skip" | "resume" | "fresh"
    ckpt: Path | None = None
    resumed_from: int | None = None  # the checkpoint's step, when resuming
    previous: RunResult | None = None  # the result.json found there, if any (the finished one, when skipping)


def plan_run(run_dir: Path, config: dict, undecided: Iterable[str] = ()) -> RunPlan:
    """Decide what to do with a run directory: skip a finished run, resume an interrupted one, start fresh.
    A directory that holds a different config is refused (RunDirError), never silently reused.

    Args:
        run_dir: the run's directory (it need not exist).
        config: the run's resolved config (config.identity.with_hardware: the device and precision as resolved);
            compared with the directory's run_config.json and checkpoint, ignoring the keys that do not change
            what a run computes (config.identity.NON_IDENTITY_KEYS).
        undecided: keys left out of the comparison because they are not known yet (the sweep planner, for
            what only the node a run starts on decides: config.identity.HARDWARE_KEYS); the run compares them itself.
    """
    ignore = (*NON_IDENTITY_KEYS, *undecided)
    _check_saved_config(run_dir, config, ignore)
    try:
        previous = RunResult.read(run_dir)
    except CorruptRecord as e:
        print(f"ffnbench: warning: {e}; the run will be resumed or redone", file=sys.stderr)
        previous = None
    if previous is not None and previous.status in FINAL_STATUSES:
        return RunPlan("skip", previous=previous)
    ckpt = last_checkpoint(run_dir)
    if ckpt.exists():
        fingerprint, step = _read_checkpoint(ckpt)
        diff = identity_diff(fingerprint, config, ignore)
        if diff:
            raise RunDirError(f"{ckpt} was written by a different config ({', '.join(diff)}); not resuming it")
        return RunPlan("resume", ckpt=ckpt, resumed_from=step, previous=previous)
    return RunPlan("fresh", previous=previous)


def _check_saved_config(run_dir: Path, config: dict, ignore: tuple[str, ...]) -> None:
    path = run_dir / RUN_CONFIG_FILE
    if not path.exists():
        return
    try:
        saved = migrate_config(read_json(path))
    except CorruptRecord as e:
        raise RunDirError(f"{e}; delete {path} if the run directory is otherwise yours") from None
    diff = identity_diff(saved, config, ignore)
    if diff:
        shown = "; ".join(f"{k}: {a!r} → {b!r}" for k, (a, b) in list(diff.items())[:6])
        raise RunDirError(
            f"{run_dir} holds a run with a different config ({shown}{' ...' if len(diff) > 6 else ''}). "
            "It is not reused: pick another directory (run_dir=..., name=... or runs_root=...) or delete it."
        )


def _read_checkpoint(ckpt: Path) -> tuple[dict, int]:
    """The config fingerprint a checkpoint was written with (in today's form), and its step."""
    import torch

    try:
        saved = torch.load(ckpt, map_location="cpu", mmap=True, weights_only=False)
    except Exception as e:
        raise RunDirError(
            f"{ckpt} cannot be read ({type(e).__name__}: {e}); delete it to start this run over"
        ) from None
    migrate_checkpoint(saved)
    return saved.get("ffnbench", {}).get("fingerprint", {}), int(saved["global_step"])


@dataclass(frozen=True)
class Holder:
    """The process that holds a run directory's lock: what its lock file says about it."""

    host: str = "?"
    pid: int | None = None
    started: str = "?"
    slurm_job: str | None = None
    launch: str | None = None  # the DDP launch its ranks share (launch_id below), None outside one

    def __str__(self) -> str:
        job = f", SLURM job {self.slurm_job}" if self.slurm_job else ""
        return f"on {self.host} (pid {self.pid}{job}) since {self.started}"

    @classmethod
    def read(cls, fd: int) -> Holder:
        try:
            info = json.loads(os.pread(fd, 4096, 0) or b"{}")
            return cls(**{k: info[k] for k in ("host", "pid", "started", "slurm_job", "launch") if k in info})
        except (OSError, ValueError, TypeError):
            return cls()  # written half, or by something else: held all the same


# The lock is a POSIX record lock (fcntl.lockf): the kind NFS, GPFS and Lustre (mounted with -o flock) share
# between nodes, so that a launch on a login node sees a run that trains on a compute node. It goes with the
# process that holds it, however that process ends. POSIX locks belong to a process, not to a file descriptor:
# this process never opens a lock file it holds a second time (closing that would drop the lock).
_BUSY = (errno.EACCES, errno.EAGAIN)
_NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


class RunLock:
    """The lock a run holds on its directory for the whole of its training.

    Args:
        run_dir: the run's directory; made when missing (and removed again on release, with the parents the lock
            made, if still empty).
    """

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / RUN_LOCK
        self._fd: int | None = None
        self._made: list[Path] = []  # the directories the lock made, innermost first

    def acquire(self, retries: int = 5, wait_s: float = 0.2) -> Holder | None:
        """Take the lock: None when taken, else the process that holds it. A few tries, `wait_s` apart: the sweep
        planner's look (lock_holder) holds it for an instant."""
        self._made = [d for d in (self.run_dir, *self.run_dir.parents) if not d.exists()]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        holder = None
        for _ in range(max(1, retries)):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in _NO_LOCKS:  # a file system without locks: run unguarded, and say so
                    os.close(fd)
                    print(f"ffnbench: warning: {self.run_dir} cannot be locked ({e.strerror}); a second launch of "
                          "this run will not see that it runs", file=sys.stderr)
                    return None
                if e.errno not in _BUSY:
                    os.close(fd)
                    raise
                holder = Holder.read(fd)
                os.close(fd)  # this process holds no lock on it: closing drops nothing
                time.sleep(wait_s)
                continue
            if not _same_file(fd, self.path):  # its holder finished and removed it meanwhile: take the new one
                os.close(fd)
                continue
            info = {"host": platform.node(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "slurm_job": os.environ.get("SLURM_JOB_ID"), "launch": launch_id()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
            self._fd = fd
            return None
        return holder or Holder()

    def release(self) -> None:
        """Give the lock back and remove its file (and the directory, if the lock made it and it is still empty)."""
        if self._fd is not None:
            try:
                if _same_file(self._fd, self.path):
                    self.path.unlink()  # while still held: a waiter that opened it sees it gone and starts over
            finally:
                os.close(self._fd)
                self._fd = None
        for directory in self._made:
            try:
                directory.rmdir()  # only when empty: a run that wrote anything keeps its directory
            except OSError:
                break
        self._made = []


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def launch_id() -> str | None:
    """What the ranks of one DDP launch that another program started (torchrun, srun) share, and another launch of
    the same run does not: the rendezvous address with the launcher's job id. None outside such a launch."""
    env = os.environ
    if "MASTER_PORT" not in env or "WORLD_SIZE" not in env:
        return None
    job = env.get("TORCHELASTIC_RUN_ID") or f"{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}"
    return f"{env.get('MASTER_ADDR', '')}:{env['MASTER_PORT']}/{job}"


def rank_zero_holds(run_dir: Path, wait_s: float = 30.0, poll_s: float = 0.5) -> Holder | None:
    """For a DDP rank above 0: None when this launch's rank 0 holds the run's lock (or nobody does once `wait_s`
    is up: a directory without locks, a run rank 0 found done), else the other process that does — so the rank
    returns at once instead of waiting in the process group's rendezvous for a rank 0 that never comes. Rank 0 is
    this launch's when it spawned this process (Lightning's launcher) or shares its launch_id (torchrun, srun)."""
    deadline = time.monotonic() + wait_s
    while True:
        holder = lock_holder(run_dir)
        if holder is not None:
            mine = holder.pid == os.getppid() or (holder.launch is not None and holder.launch == launch_id())
            return None if mine else holder
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)


def lock_holder(run_dir: Path) -> Holder | None:
    """The process training the run in `run_dir` now, None when no process is (the sweep planner asks). Creates
    nothing; takes the lock for an instant when it is free, so a process that may hold it must not ask (its
    own lock would be dropped: POSIX locks belong to the process)."""
    try:
        fd = os.open(Path(run_dir) / RUN_LOCK, os.O_RDWR)
    except OSError:
        return None  # no lock file (or not ours to lock): nobody trains it from here
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        return Holder.read(fd) if e.errno in _BUSY else None
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def holds_only_hydra_files(run_dir: Path, log_files: set[str]) -> bool:
    """Whether `run_dir` holds nothing but what Hydra writes before a job starts (.hydra/ with its three
    files, and the job's log files `log_files`), so that removing it loses no run's work."""
    for entry in run_dir.iterdir():
        if entry.name in HYDRA_FILES and entry.is_dir() and not entry.is_symlink():
            if not {p.name for p in entry.iterdir()} <= HYDRA_FILES[entry.name]:
                return False
        elif not (entry.name in log_files and entry.is_file()):
            return False
    return True


def remove_failed_start(run_dir: Path, log_files: set[str], stop_at: Path | None = None) -> bool:
    """After a start refused for a user error: remove `run_dir` if it holds only what Hydra wrote for this
    start (never a directory with a result, a checkpoint or a run_config.json), then the parents that are
    left empty, up to `stop_at` (excluded). Returns whether the run directory was removed."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not holds_only_hydra_files(run_dir, log_files):
        return False
    shutil.rmtree(run_dir)
    if stop_at is not None:
        stop_at = Path(stop_at).resolve()
        parent = run_dir.resolve().parent
        while parent != stop_at and stop_at in parent.parents and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    return True
