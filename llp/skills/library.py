"""A skill's references in the grown library, the course that follows them, and the conditions it meets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llp.config.schema import field

DEFAULT_LIBRARY = "reference_augmentation"  # the stage that grows the climb's references


@dataclass(kw_only=True)
class CourseOfSkill:
    """A stage whose course takes a skill's obstacle as its library holds it (its kind and depth, at every height
    the library reached), not as written in the course's terrain, so that the course follows the library when the
    library grows, and a vault's course has the vault."""

    library: str = field(
        default=DEFAULT_LIBRARY,
        doc="Stage whose 'library' gives the course's obstacle: `skill`'s, at every accepted height ('': the "
        "obstacle written in the course's terrain).",
    )
    skill: str = field(default="climb_step", doc="The skill whose obstacle the course takes.")

    def course_input(self) -> dict[str, str]:
        return {"library": f"{self.library}.library"} if self.library else {}

    def course_obstacle(self, ctx, inputs: dict[str, str]):
        """The library's obstacle of the skill (None without a library input), said on the console."""
        if "library" not in inputs:
            return None
        from llp.motion.library import accepted_obstacle

        obstacle = accepted_obstacle(ctx.load_dataset(inputs["library"]), self.skill)
        print(f"[llp] {ctx.stage}: the course at the library's {self.skill} obstacle ({obstacle.kind}, "
              f"{obstacle.depth} m deep) at {list(obstacle.heights)} m", flush=True)  # fmt: skip
        return obstacle


def course_at(overrides: dict[str, Any], obstacle) -> dict[str, Any]:
    """Course overrides whose tiles are ``obstacle`` (a ``SkillObstacle``): its kind and depth, a level per height
    (at least two: the start curriculum's); unchanged for None."""
    from llp.config.schema import merge
    from llp.sim.terrain import COURSE_OBSTACLES

    if obstacle is None:
        return overrides
    heights_field, depth_field = COURSE_OBSTACLES[obstacle.kind]
    terrain = {"tile_types": [obstacle.kind], heights_field: list(obstacle.heights), depth_field: obstacle.depth,
               "num_levels": max(2, len(obstacle.heights))}  # fmt: skip
    return merge(overrides, {"terrain": terrain})


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
