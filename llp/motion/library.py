"""A reference library: motions with their obstacles and provenance, in one folder.

``index.json`` lists the entries; each entry's joint trajectory is ``<id>.npz``. An entry records where it
came from (seed, growth round, parent entry), what it is paired with (obstacle, intended contacts), how it
was made, and its acceptance checks with their numbers. Entries are only added, never rewritten.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from llp.config.schema import build, to_dict
from llp.motion.acceptance import Acceptance
from llp.motion.scene import Contact, ObstacleBox

INDEX = "index.json"


class LibraryError(ValueError):
    """A library folder whose index or motion files are not what the index says."""


@dataclass
class Reference:
    """One motion reference and its provenance."""

    id: str
    skill: str
    seed: str
    round: int
    parent: str | None
    obstacle: ObstacleBox
    contacts: list[Contact]
    fps: float
    made_by: str
    acceptance: list[Acceptance] = field(default_factory=list)
    tracking_error_m: float | None = None  # mean body-position error of the physics rollout (growth rounds)
    success_rate: float | None = None  # of the dynamic acceptance trials
    heading_drift_deg: float | None = None  # the root's largest turn off the seed's heading (growth rounds)
    qpos: np.ndarray | None = None  # [T, nq], loaded on demand
    # growth rounds: the raised proposal the round's tracker was trained on ([T, nq], loaded with the motion).
    # The tracker follows it, not the physics rollout kept as ``qpos``: a skill stage whose expert is that
    # tracker must give it this reference (on its own rollout as reference, the 30 cm tracker fell every time)
    tracked: np.ndarray | None = None
    # growth rounds: the models:/ URI of the round's tracker, which follows ``tracked`` (registered with the
    # library; a skill stage's phase A routes it to the envs on this reference). None: not registered (a rejected
    # round, or a library grown before trackers were kept per round)
    tracker: str | None = None

    @property
    def accepted(self) -> bool:
        """Every check that has run passed."""
        return all(a.passed is not False for a in self.acceptance)

    def to_json(self) -> dict:
        skip = ("qpos", "tracked", "obstacle", "contacts", "acceptance")
        d = {k: v for k, v in asdict(self).items() if k not in skip}
        d["obstacle"] = to_dict(self.obstacle)
        d["contacts"] = [to_dict(c) for c in self.contacts]
        d["acceptance"] = [a.to_dict() for a in self.acceptance]
        d["num_frames"] = None if self.qpos is None else int(len(self.qpos))
        return d

    @classmethod
    def from_json(cls, d: dict) -> Reference:
        d = dict(d)
        d.pop("num_frames", None)
        d["obstacle"] = build(ObstacleBox, d["obstacle"], "obstacle")
        d["contacts"] = [build(Contact, c, "contacts") for c in d["contacts"]]
        d["acceptance"] = [Acceptance(**a) for a in d["acceptance"]]
        return cls(**d)


class ReferenceLibrary:
    """The entries of one library folder."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        index = self.root / INDEX
        self.entries: list[Reference] = []
        if index.is_file():
            self.entries = _read_index(index)
            missing = [e.id for e in self.entries if not (self.root / f"{e.id}.npz").is_file()]
            if missing:
                raise LibraryError(f"{index}: the motion files of {', '.join(missing)} are missing ({missing[0]}.npz)")

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, ref_id: str, with_motion: bool = False) -> Reference:
        for e in self.entries:
            if e.id == ref_id:
                if with_motion and e.qpos is None:
                    e.qpos, e.tracked = _read_motion(self.root / f"{ref_id}.npz")
                return e
        raise KeyError(f"no reference {ref_id!r} in {self.root}; it has {[e.id for e in self.entries]}")

    def add(self, ref: Reference) -> Reference:
        """Store a new entry (its motion first, then the index, each written whole)."""
        if any(e.id == ref.id for e in self.entries):
            raise ValueError(f"{self.root} already holds a reference {ref.id!r}")
        if ref.parent is not None:
            self.get(ref.parent)  # a parent must exist: the lineage stays whole
        if ref.qpos is None:
            raise ValueError(f"reference {ref.id!r} has no motion")
        self.root.mkdir(parents=True, exist_ok=True)
        extra = {} if ref.tracked is None else {"tracked": ref.tracked}
        _write_atomic(self.root / f"{ref.id}.npz",
                      lambda f: np.savez_compressed(f, qpos=ref.qpos, fps=ref.fps, **extra))  # fmt: skip
        self.entries.append(ref)
        self._write_index()
        return ref

    def _write_index(self) -> None:
        text = json.dumps({"entries": [e.to_json() for e in self.entries]}, indent=1)
        _write_atomic(self.root / INDEX, lambda f: f.write(text.encode()))

    def set_tracker(self, ref_id: str, uri: str) -> None:
        """Record the registered tracker of entry ``ref_id`` (the index rewritten whole)."""
        self.get(ref_id).tracker = uri
        self._write_index()

    def lineage(self, ref_id: str) -> list[Reference]:
        """The entry and its ancestors, the seed's entry last."""
        chain = [self.get(ref_id)]
        while chain[-1].parent is not None:
            chain.append(self.get(chain[-1].parent))
        return chain

    def table(self) -> str:
        """The entries with provenance, as a Markdown table."""
        head = (
            "| id | skill | round | parent | obstacle | checks | tracking error | success | heading drift | made by "
            "| tracker |"
        )
        rows = [head, "|" + "---|" * 11]
        for e in self.entries:
            checks = ", ".join(f"{a.name} {_verdict(a.passed)}" for a in e.acceptance)
            err = "-" if e.tracking_error_m is None else f"{100 * e.tracking_error_m:.1f} cm"
            succ = "-" if e.success_rate is None else f"{100 * e.success_rate:.0f}%"
            drift = "-" if e.heading_drift_deg is None else f"{e.heading_drift_deg:.1f} deg"
            obst = f"{e.obstacle.kind} {round(100 * e.obstacle.height, 1):g} cm"
            rows.append(
                f"| {e.id} | {e.skill} | {e.round} | {e.parent or '-'} | {obst} | {checks} | {err} | {succ} | "
                f"{drift} | {e.made_by.split(',')[0]} | {e.tracker or '-'} |"
            )
        return "\n".join(rows)


def open_library(folder: str | Path) -> ReferenceLibrary:
    """The library whose index lies in ``folder`` or below it (a downloaded dataset nests it)."""
    index = next(Path(folder).rglob(INDEX), None)
    if index is None:
        raise LibraryError(f"{folder}: no reference library ({INDEX}) in it")
    return ReferenceLibrary(index.parent)


@dataclass(frozen=True)
class SkillObstacle:
    """What a skill's course puts after its approach: the obstacle of the skill's accepted library entries."""

    kind: str  # a terrain tile type of llp.sim.terrain.COURSE_OBSTACLES: climb or vault
    heights: tuple[float, ...]  # metres, lowest first: every height the library reached
    depth: float  # along the approach, metres


def accepted_obstacle(folder: str | Path, skill: str) -> SkillObstacle:
    """The obstacle of ``skill``'s accepted physics-tracked entries: one kind and depth, every height."""
    library = open_library(folder)
    entries = [e for e in library.entries if e.skill == skill and e.accepted and e.round > 0]
    if not entries:
        raise LibraryError(f"{library.root}: no accepted physics-tracked {skill!r} entry")
    shapes = {(e.obstacle.kind, round(e.obstacle.depth, 4)) for e in entries}
    if len(shapes) > 1:
        raise LibraryError(f"{library.root}: {skill!r}'s accepted entries differ in obstacle (kind, depth): "
                           f"{sorted(shapes)}; a course takes one")  # fmt: skip
    (kind, depth), heights = shapes.pop(), sorted({round(e.obstacle.height, 4) for e in entries})
    return SkillObstacle(kind, tuple(heights), depth)


def _read_index(index: Path) -> list[Reference]:
    try:
        data = json.loads(index.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise LibraryError(f"{index}: not valid JSON ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise LibraryError(f"{index}: expected an object with a list 'entries'")
    entries = []
    for i, d in enumerate(data["entries"]):
        name = d.get("id", f"#{i}") if isinstance(d, dict) else f"#{i}"
        try:
            entries.append(Reference.from_json(d))
        except (TypeError, KeyError, ValueError, AttributeError) as err:
            raise LibraryError(f"{index}: entry {name}: {err}") from None
    ids = [e.id for e in entries]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise LibraryError(f"{index}: the id {dupes[0]!r} appears more than once")
    return entries


def _read_motion(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """The motion and, for a growth round, the proposal its tracker was trained on."""
    try:
        data = np.load(path)
        qpos = data["qpos"]
        tracked = data["tracked"] if "tracked" in data.files else None
    except (OSError, KeyError, ValueError) as err:
        raise LibraryError(f"{path}: not a motion file with an array 'qpos' ({err})") from None
    for name, q in (("qpos", qpos), ("tracked", tracked)):
        if q is not None and (q.ndim != 2 or not np.isfinite(q).all()):
            raise LibraryError(f"{path}: '{name}' must be a finite [frames, nq] array, got shape {q.shape}")
    return qpos, tracked


def _verdict(passed: bool | None) -> str:
    return {True: "passed", False: "FAILED", None: "not run"}[passed]


def _write_atomic(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
