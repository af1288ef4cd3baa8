"""Fixtures shared by the test modules."""

import errno
import os
import signal
import socket

import pytest


def pytest_configure(config):
    """Under pytest-xdist (`make test` runs -n auto), the workers share the cores instead of each using all of
    them: torch threads (and OMP_NUM_THREADS, for the subprocesses tests start) = cores ÷ workers. And Ctrl-C is
    Ctrl-C: a suite started in the background (`make test &`, nohup) inherits SIGINT ignored, as would every run it
    starts, and the Ctrl-C tests would see a run that rightly ignores it; a user at a terminal has the default."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a Python handler: children exec with the default
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        import torch

        threads = max(1, (os.cpu_count() or 1) // int(workers))
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)

NO_DNS = "Name or service not known (no network in tests)"


@pytest.fixture
def no_network(monkeypatch):
    """Every way out to the network fails at once, as on an offline machine: name lookups fail (DNS), and
    connecting any socket but a local (AF_UNIX) one finds the network unreachable."""

    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, NO_DNS)

    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def refuse_connect(sock, address):
        if sock.family == socket.AF_UNIX:
            return connect(sock, address)
        raise OSError(errno.ENETUNREACH, "Network is unreachable (no network in tests)")

    def refuse_connect_ex(sock, address):
        if sock.family == socket.AF_UNIX:
            return connect_ex(sock, address)
        return errno.ENETUNREACH  # connect_ex reports the failure as an errno instead of raising

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    monkeypatch.setattr(socket, "create_connection", no_dns)
    monkeypatch.setattr(socket.socket, "connect", refuse_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse_connect_ex)


HOLD_RUN = """
import sys, time
from pathlib import Path
from ffnbench.runs.rundir import RunLock
assert RunLock(Path(sys.argv[1])).acquire() is None
print("held", flush=True)
time.sleep(300)
"""


@pytest.fixture
def hold_run():
    """hold_run(run_dir) → a process that holds the run directory's lock, as a run training there does; killed
    at the end of the test."""
    import os
    import subprocess
    import sys

    processes = []

    def hold(run_dir):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        process = subprocess.Popen([sys.executable, "-c", HOLD_RUN, str(run_dir)], stdout=subprocess.PIPE, text=True,
                                   env=env)
        processes.append(process)
        assert process.stdout.readline().strip() == "held"
        return process

    yield hold
    for process in processes:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """The data cache of the micro training runs (tests/test_train.py, tests/integration/): built once a process."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def finished(cache_dir, tmp_path_factory):
    """One uninterrupted micro run that several tests compare against, and the batches it trained on: (RunResult,
    run directory, step → rows). Session-scoped so that the test files that compare against it share one run."""
    from micro_runs import RecordBatches, micro

    from ffnbench.train import train

    run_dir = tmp_path_factory.mktemp("runs") / "reference"
    batches = RecordBatches()
    return train(micro(cache_dir, run_dir), callbacks=[batches]), run_dir, batches.rows
