"""Configuration of a parkour env: robot, terrain, sensors, commands, task terms, randomisation."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llp.config.schema import check, field
from llp.sim.backend import check_backend
from llp.sim.camera_model import CameraModelConfig
from llp.sim.rewards import REWARD_TERMS, term_parameters
from llp.sim.robot import RobotConfig
from llp.sim.sensors import DepthCameraConfig, FootRaysConfig, HeightScanConfig
from llp.sim.terrain import TerrainConfig

OBSERVATION_TERMS = (
    "proprio",  # base angular velocity, projected gravity, joint positions and velocities, last action
    "command",  # (vx, vy, yaw rate)
    "height_scan",  # terrain heights around the base
    "foot_scan",  # terrain under each foot relative to the sole
    "depth",  # flattened depth image, normalised to [0, 1]
    "privileged",  # base velocity and height, foot contacts, randomised physics
    "group_onehot",  # one-hot of the env's tile column (expert group)
    "amp_features",  # AMP's state features: base height, gravity, base velocities, joint positions and velocities
    "progress",  # course progress: metres along the course past its first phase trigger (-10 on tiles without)
    "gait_clock",  # cos and sin of each foot's gait phase (4 values); the phase the feet_phase reward follows
)


@dataclass(kw_only=True)
class CommandConfig:
    """Velocity commands (base yaw frame), resampled per env."""

    resample_s: float = field(default=5.0, doc="Seconds between command resamples (per env).")
    lin_vel_x: tuple[float, float] = field(default=(-0.3, 0.8), doc="Forward speed range, m/s.")
    lin_vel_y: tuple[float, float] = field(default=(-0.3, 0.3), doc="Lateral speed range, m/s.")
    ang_vel_yaw: tuple[float, float] = field(default=(-0.8, 0.8), doc="Yaw rate range, rad/s (heading off).")
    heading_command: bool = field(default=True, doc="Command a heading; the yaw rate follows the heading error.")
    heading_fraction: float = field(
        default=1.0, doc="With heading commands on: fraction of resamples that command a heading (others: a yaw rate)."
    )
    heading_stiffness: float = field(default=0.8, doc="Yaw rate per radian of heading error.")
    standing_fraction: float = field(default=0.05, doc="Fraction of resamples that command standing still.")
    goal_speed: tuple[float, float] = field(default=(0.4, 0.8), doc="Goal tiles: forward speed towards the goal.")
    failure_focus: float = field(
        default=0.0,
        doc="Share of moving commands drawn again inside one command region (llp.sim.command_regions), picked in "
        "proportion to how often the env's episodes have recently fallen there: more practice where the policy "
        "falls: a failure-driven curriculum over commands, as prioritized level replay (Jiang et al. 2021) "
        "replays the levels an agent does worst on (Margolis et al. 2022 adapt the command distribution the other "
        "way, widening it where the policy already tracks). 0: every command uniform over the ranges. Measured at 0.3 "
        "on the local teacher: 15 of 200 flat falls, as without it (docs/experiments/2026-12-05-flat-ground-falls.md)",
    )

    def validate(self, path: str) -> None:
        check(self.resample_s > 0, f"{path}.resample_s", "must be positive")
        check(0.0 <= self.failure_focus <= 1.0, f"{path}.failure_focus", "must be in [0, 1]")
        for name in ("lin_vel_x", "lin_vel_y", "ang_vel_yaw", "goal_speed"):
            lo, hi = getattr(self, name)
            check(lo <= hi, f"{path}.{name}", f"lower bound {lo} exceeds upper bound {hi}")
        check(0.0 <= self.standing_fraction <= 1.0, f"{path}.standing_fraction", "must be in [0, 1]")
        check(0.0 <= self.heading_fraction <= 1.0, f"{path}.heading_fraction", "must be in [0, 1]")


@dataclass(kw_only=True)
class TermConfig:
    """One weighted task term."""

    weight: float = field(doc="Weight; rewards need >= 0, penalties <= 0.")
    params: dict[str, Any] = field(default_factory=dict, doc="Keyword parameters of the term function.")


@dataclass(kw_only=True)
class GaitConfig:
    """A gait clock: each foot's phase advances at a per-episode frequency, the right foot half a cycle behind
    the left. Observed as ``gait_clock``; the ``feet_phase`` reward asks the feet to follow it."""

    frequency: tuple[float, float] = field(
        default=(1.25, 1.5), doc="Stride frequency range, Hz, drawn per episode (MuJoCo Playground G1: 1.25-1.5)."
    )

    def validate(self, path: str) -> None:
        lo, hi = self.frequency
        check(0 < lo <= hi, f"{path}.frequency", f"needs 0 < low <= high, got {list(self.frequency)}")


@dataclass(kw_only=True)
class TerminationConfig:
    """When an episode ends: falls terminate, time limits and leaving the tile truncate."""

    episode_length_s: float = field(default=20.0, doc="Time limit, seconds (a time-out is a truncation).")
    max_tilt: float = field(default=1.0, doc="Base tilt beyond which the robot has fallen, radians.")
    min_base_height: float = field(default=0.18, doc="Base height above the ground under it below which it fell, m.")
    contact_threshold: float = field(default=1.0, doc="Force on a termination body that counts as a fall, N.")
    goal_radius: float = field(default=0.3, doc="Goal tiles: distance to the goal that counts as reaching it, m.")
    goal_stall_s: float = field(
        default=0.0,
        doc="Goal tiles: an episode that has not come goal_stall_distance closer to the goal for this long ends as a "
        "failure (terminated, as a fall: no bootstrap, the termination reward), where the evaluation would call the "
        "trial stuck. 0: off.",
    )
    goal_stall_distance: float = field(default=0.25, doc="Goal tiles: progress towards the goal that counts, m.")

    def validate(self, path: str) -> None:
        check(self.episode_length_s > 0, f"{path}.episode_length_s", "must be positive")
        check(self.goal_stall_s >= 0, f"{path}.goal_stall_s", "must be >= 0 (0: off)")
        check(self.goal_stall_distance > 0, f"{path}.goal_stall_distance", "must be positive")
        check(0 < self.max_tilt <= math.pi, f"{path}.max_tilt", "must be in (0, pi]")


@dataclass(kw_only=True)
class RandomizationConfig:
    """Domain randomisation, drawn per env at every reset."""

    friction: tuple[float, float] | None = field(default=(0.5, 1.25), doc="Robot-ground friction range; null = off.")
    added_mass: tuple[float, float] | None = field(default=(-1.0, 2.0), doc="Mass added to the base, kg; null = off.")
    motor_strength: tuple[float, float] | None = field(
        default=(0.9, 1.1), doc="Scale of every PD gain (kp and kv); null = off."
    )
    push_interval_s: float | None = field(default=8.0, doc="Seconds between random pushes; null = off.")
    push_velocity: float = field(default=0.5, doc="Largest base velocity change of a push, m/s.")
    init_joint_noise: float = field(default=0.05, doc="Uniform noise on initial joint positions, radians.")
    spawn_jitter: float = field(default=0.3, doc="Uniform jitter of the spawn position, metres.")
    goal_starts: list[tuple[float, float]] = field(
        default_factory=lambda: [(0.0, 0.0)],
        doc="Goal tiles: where episodes start, as ranges of distance along the course from the tile's spawn "
        "(metres); each episode draws a range, then a point in it. [[0, 0]]: at the spawn. LLP's transition "
        "stage starts episodes before, on and after the obstacle (keep the ranges off the obstacle's edges).",
    )
    goal_start_curriculum: bool = field(
        default=False,
        doc="Goal tiles: goal_starts are the steps of a start curriculum, listed from the easiest (nearest the "
        "goal) to the hardest. Each env starts at the first and moves one step on after reaching the goal, "
        "one step back after an episode that did not (a reverse curriculum: Florensa et al. 2017).",
    )

    def validate(self, path: str) -> None:
        check(len(self.goal_starts) >= 1, f"{path}.goal_starts", "needs at least one range, e.g. [[0, 0]]")
        for i, (lo, hi) in enumerate(self.goal_starts):
            check(0.0 <= lo <= hi, f"{path}.goal_starts[{i}]", f"[{lo}, {hi}]: need 0 <= start <= end (metres)")
        for name in ("friction", "added_mass", "motor_strength"):
            rng = getattr(self, name)
            if rng is not None:
                check(rng[0] <= rng[1], f"{path}.{name}", f"lower bound {rng[0]} exceeds upper bound {rng[1]}")
        if self.friction is not None:
            check(self.friction[0] > 0, f"{path}.friction", "friction must be positive")
        if self.motor_strength is not None:
            check(self.motor_strength[0] > 0, f"{path}.motor_strength", "must be positive")
        if self.push_interval_s is not None:
            check(self.push_interval_s > 0, f"{path}.push_interval_s", "must be positive (or null for off)")


@dataclass(kw_only=True)
class CurriculumConfig:
    """Terrain levels: promote envs that master their tile, demote those that fail.

    Goal tiles: up on reaching the goal, down on a fall. Other tiles: up after walking 40% of a tile length
    from the spawn; down when the robot got less than half as far as its commands would have carried it
    (the world-frame integral of the commanded velocity, at most half a tile)."""

    enabled: bool = field(default=True, doc="Move envs between levels at reset.")
    initial_max_level: int = field(default=0, doc="Envs start at a random level in [0, initial_max_level].")
    initial_levels: str = field(
        default="random",
        doc="'random': levels drawn in [0, initial_max_level]; 'spread': env i gets level (i // columns) mod "
        "(initial_max_level + 1), so every (type, level) tile gets envs (evaluation).",
    )

    def validate(self, path: str) -> None:
        check(self.initial_max_level >= 0, f"{path}.initial_max_level", "must be >= 0")
        check(
            self.initial_levels in ("random", "spread"), f"{path}.initial_levels", "allowed values: 'random', 'spread'"
        )


@dataclass(kw_only=True)
class EnvConfig:
    """Everything that defines an env except how many envs run."""

    robot: RobotConfig = field(doc="The robot (see conf/robot/).")
    terrain: TerrainConfig = field(default_factory=TerrainConfig, doc="Tile grid and obstacle sizes.")
    physics_dt: float = field(default=0.005, doc="Physics step, seconds (200 Hz).")
    decimation: int = field(default=4, doc="Physics steps per policy step (50 Hz policy).")
    action_clip: float = field(default=10.0, doc="Actions are clipped to +-action_clip before scaling.")
    solver_iterations: int = field(default=6, doc="MuJoCo constraint solver iterations.")
    height_scan: HeightScanConfig = field(default_factory=HeightScanConfig, doc="Height scan around the base.")
    foot_rays: FootRaysConfig = field(default_factory=FootRaysConfig, doc="Rays under each foot.")
    depth_camera: DepthCameraConfig = field(default_factory=DepthCameraConfig, doc="Chest depth camera.")
    camera_model: CameraModelConfig = field(
        default_factory=CameraModelConfig,
        doc="What the real camera does to its images (noise, scale, dropouts, frame rate, latency); perfect by "
        "default (exact images at every tick).",
    )
    camera_envs: int | None = field(
        default=None, doc="Envs (the first ones) that render depth when a group needs it; null = all."
    )
    observations: dict[str, list[str]] = field(
        default_factory=lambda: {
            "policy": ["proprio", "command", "height_scan"],
            "critic": ["proprio", "command", "height_scan", "privileged"],
        },
        doc=f"Observation groups: name -> terms. Terms: {', '.join(OBSERVATION_TERMS)}.",
    )
    commands: CommandConfig = field(default_factory=CommandConfig, doc="Velocity commands.")
    rewards: dict[str, TermConfig] = field(default_factory=dict, doc="Reward terms by name with weights.")
    only_positive_rewards: bool = field(
        default=True,
        doc="Clip each step's total reward at 0 (legged_gym's rule): while penalties outweigh the rewards, "
        "ending the episode early must not look better than surviving. Per-group rewards (several value heads) "
        "are not clipped.",
    )
    terminations: TerminationConfig = field(default_factory=TerminationConfig, doc="Episode ends.")
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig, doc="Domain randomisation.")
    gait: GaitConfig = field(default_factory=GaitConfig, doc="Gait clock (observation gait_clock, reward feet_phase).")
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig, doc="Terrain curriculum.")
    backend: str = field(
        default="mujoco",
        doc="Physics engine: mujoco (C, one model per tile), warp (MuJoCo Warp, every env a world of one model) or "
        "isaaclab (Isaac Lab 3 on Newton, in its own environment: make isaaclab). The pipeline's sim.backend sets "
        "it for every stage.",
    )
    device: str = field(default="cpu", doc="Where the warp and isaaclab backends run: cpu, cuda or cuda:N.")

    @property
    def policy_dt(self) -> float:
        return self.physics_dt * self.decimation

    def validate(self, path: str) -> None:
        p = f"{path}." if path else ""
        check(self.physics_dt > 0, f"{p}physics_dt", "must be positive")
        check(self.decimation >= 1, f"{p}decimation", "must be >= 1")
        check(self.solver_iterations >= 1, f"{p}solver_iterations", "must be >= 1")
        check_backend(self.backend, self.device, path)
        check(self.camera_envs is None or self.camera_envs >= 0, f"{p}camera_envs", "must be >= 0 or null")
        check(len(self.observations) > 0, f"{p}observations", "needs at least one group")
        for group, terms in self.observations.items():
            check(len(terms) > 0, f"{p}observations.{group}", "a group needs at least one term")
            for i, term in enumerate(terms):
                check(
                    term in OBSERVATION_TERMS,
                    f"{p}observations.{group}[{i}]",
                    f"got {term!r}, allowed values: {', '.join(OBSERVATION_TERMS)}",
                )
        for name, term in self.rewards.items():
            where = f"{p}rewards.{name}"
            check(name in REWARD_TERMS, where, f"unknown reward term; allowed: {', '.join(sorted(REWARD_TERMS))}")
            kind = REWARD_TERMS[name].kind
            if kind == "penalty":
                check(term.weight <= 0, f"{where}.weight", f"{name} is a penalty: its weight must be <= 0")
            else:
                check(term.weight >= 0, f"{where}.weight", f"{name} is a reward: its weight must be >= 0")
            allowed = term_parameters(name)
            for key in term.params:
                check(key in allowed, f"{where}.params.{key}", f"unknown parameter; allowed: {sorted(allowed)}")
