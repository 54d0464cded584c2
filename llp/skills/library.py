"""A skill's references in the grown library, and the conditions its course meets."""

from __future__ import annotations

from typing import Any


# The locomotion task's friction and the course's sideways spawn, which the skill meets on the transition course:
# trained without them, the merged student climbed from the skill's start on the course in 37.5% of 40 trials,
# with them 82.5% (README, "Transition training", chain-r)
def course_conditions() -> dict[str, Any]:
    return {"friction": [0.5, 1.25], "lateral_m": 0.15}


def skill_references(library_dir, skill: str) -> list:
    """The accepted physics-tracked library entries of ``skill`` (with their motions), lowest obstacle first."""
    from pathlib import Path

    from llp.motion.library import INDEX, ReferenceLibrary

    index = next(Path(library_dir).rglob(INDEX), None)
    if index is None:
        raise ValueError(f"{library_dir}: no reference library ({INDEX}) in the input dataset")
    library = ReferenceLibrary(index.parent)
    accepted = [e for e in library.entries if e.skill == skill and e.accepted and e.round > 0]
    if not accepted:
        have = sorted({f"{e.skill} ({e.id}, {'accepted' if e.accepted else 'rejected'})" for e in library.entries})
        raise ValueError(f"the reference library has no accepted physics-tracked {skill!r} entry (it has {have})")
    accepted.sort(key=lambda e: (e.obstacle.height, e.round))
    return [library.get(e.id, with_motion=True) for e in accepted]


def hardest_reference(library_dir, skill: str):
    """The accepted library entry of ``skill`` with the tallest obstacle (with its motion)."""
    return skill_references(library_dir, skill)[-1]
