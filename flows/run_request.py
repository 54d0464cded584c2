"""What `llp run` and `llp resume` are asked to do, checked before any server, Ray or folder exists.

A run id names a folder under the run root, so it must be one plain path
component; the run root must be a folder this user can write (or create);
the stage selection must name stages of the pipeline and select at least one.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_MAX = 255  # bytes in one path component (ext4, xfs, APFS)
PATH_MAX = 4096


def check_run_id(run_id: str, label: str = "--run-id") -> str:
    if not RUN_ID.fullmatch(run_id):
        shown = run_id if len(run_id) <= 40 else run_id[:37] + "..."
        raise ValueError(
            f"{label} {shown!r}: a run id is 1-64 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit (it names a folder under the run root)"
        )
    return run_id


def check_run_root(run_root: str | Path) -> Path:
    """The run root exists as a writable folder, or the nearest existing folder above it is writable."""
    path = Path(os.path.abspath(run_root))
    text = str(path)
    if len(text.encode()) > PATH_MAX:
        raise ValueError(f"run_root: the path is {len(text.encode())} bytes long; the limit is {PATH_MAX}")
    long = [part for part in path.parts if len(part.encode()) > NAME_MAX]
    if long:
        raise ValueError(f"run_root: the folder name {long[0][:40]!r}... is longer than {NAME_MAX} bytes")
    existing = path
    while not existing.exists():
        if existing.is_symlink():
            raise ValueError(f"run_root: {existing} is a link to nothing")
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"run_root: {existing} is a file, not a folder ({path} cannot be created)")
    try:  # a real write, removed at once: permissions, read-only mounts and pseudo file systems all show here
        tempfile.TemporaryDirectory(dir=existing, prefix=".llp-write-check-").cleanup()
    except OSError as err:
        what = "it" if existing == path else f"{existing}, where it would be created,"
        raise ValueError(
            f"run_root {path}: {what} cannot be written ({err.strerror}); choose another with --set run_root="
        ) from None
    return path


def select_stages(
    stages: list[str], from_stage: str | None, until_stage: str | None, force: list[str] | None = None
) -> list[str]:
    """The stages between from_stage and until_stage (inclusive); names are checked and the range may not be empty."""
    for name, label in (
        (from_stage, "--from-stage"),
        (until_stage, "--until-stage"),
        *[(f, "--force") for f in force or []],
    ):
        if name is not None and name not in stages:
            raise ValueError(f"{label} {name!r}: not a stage of this pipeline ({', '.join(stages)})")
    first = stages.index(from_stage) if from_stage else 0
    last = stages.index(until_stage) if until_stage else len(stages) - 1
    if first > last:
        raise ValueError(
            f"--from-stage {stages[first]!r} comes after --until-stage {stages[last]!r}: that selects no stage "
            f"(pipeline order: {', '.join(stages)})"
        )
    return stages[first : last + 1]
