"""Read what a wandb run logged from its offline `.wandb` file (a LevelDB-style record log of protobufs),
so tests can check the config, tags and summary without a wandb server."""

from __future__ import annotations

import struct
import time
from pathlib import Path

BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    if len(data) < 7:  # not even the header written yet
        return []
    assert data[:4] == b":W&B", f"{path} is not a wandb run file"
    pos, chunks, pending = 7, [], b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        if pos + 7 + length > len(data):  # a record still being written
            break
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == FULL:
            chunks.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            chunks.append(pending + chunk)
    records = []
    for raw in chunks:
        record = pb.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records


def finished_records(path: Path, timeout_s: float = 120.0) -> list:
    """The records of a run log once it holds the run's `exit` record.

    `wandb.finish()` returns before wandb-core has flushed the file (seen on a loaded 2-core machine: the log
    still lacked even the `run` record), so read it again until the run's last record is there."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = read_records(path)
        kinds = [r.WhichOneof("record_type") for r in records]
        if "exit" in kinds:
            return records
        assert time.monotonic() < deadline, f"{path} has no exit record after {timeout_s:.0f} s: {kinds}"
        time.sleep(0.2)


def read_run(path: Path) -> dict:
    """One offline run file: {'id', 'group', 'tags', 'name', 'config': {key: json}, 'summary': {key: json},
    'history': [{key: value}, ...] (one per logged row, values decoded), 'metrics': {name or glob: step metric}}."""
    import json

    info: dict = {"config": {}, "summary": {}, "history": [], "metrics": {}}
    for record in finished_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            info.update(id=record.run.run_id, group=record.run.run_group, tags=list(record.run.tags),
                        name=record.run.display_name)
            info["config"].update({u.key: u.value_json for u in record.run.config.update})
        elif kind == "config":
            info["config"].update({u.key: u.value_json for u in record.config.update})
        elif kind == "summary":
            info["summary"].update({u.key: u.value_json for u in record.summary.update if u.key})
        elif kind == "history":
            info["history"].append({"/".join(i.nested_key) or i.key: json.loads(i.value_json)
                                    for i in record.history.item})
        elif kind == "metric":
            info["metrics"][record.metric.name or record.metric.glob_name] = record.metric.step_metric
    return info


def run_files(run_dir: Path) -> list[Path]:
    """The offline run files under run_dir/wandb, oldest first (a resumed run has one per start)."""
    files = sorted(Path(run_dir).glob("wandb/offline-run-*/run-*.wandb"))
    assert files, f"no offline wandb run under {run_dir}"
    return files


def run_info(run_dir: Path) -> dict:
    """read_run of the latest offline run in run_dir/wandb."""
    return read_run(run_files(run_dir)[-1])
