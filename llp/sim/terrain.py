"""Terrain generator: a grid of tiles (rows = curriculum levels, columns = tile types).

Everything is built from axis-aligned boxes, convex prisms and (for rough
ground) heightfields, and every tile records its ground-truth geometry: the
obstacles' kind, position and size, where a robot spawns, where its goal is and,
for transition courses, where the approach, obstacle and after-obstacle phases
begin. A global height grid rasterised from the same geometry backs the height
scan and the foot rays, so what the robot "sees" and what it collides with
cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field

import numpy as np

from llp.config.schema import check, field

TILE_TYPES = (
    "flat",
    "rough",
    "stairs_up",
    "stairs_down",
    "climb",
    "vault",
    "trapezoid_vault",
    "saddle_vault",
    "stepping_stones",
    "plank",
    "gaps",
    "course",
    "course_succession",
)
# Tile types whose robots are given a goal straight ahead rather than a random velocity command.
GOAL_TYPES = frozenset(TILE_TYPES[4:])
# Tile types a skill's course can be: the approach, one obstacle, the goal on or past it. Each with the terrain
# fields that set the obstacle's heights and its depth along the approach (a library obstacle's kind names one).
COURSE_OBSTACLES = {
    "climb": ("climb_heights", "platform_depth"),
    "vault": ("vault_heights", "vault_depth"),
    "trapezoid_vault": ("vault_heights", "vault_depth"),
    "saddle_vault": ("vault_heights", "vault_depth"),
}


@dataclass(kw_only=True)
class TerrainConfig:
    """Tile grid, curriculum and the size ranges of each tile type (easiest level -> hardest level)."""

    tile_types: list[str] = field(
        default_factory=lambda: ["flat", "rough", "stairs_up", "stairs_down"],
        doc=f"One column of tiles per entry, in order. Allowed: {', '.join(TILE_TYPES)}.",
    )
    num_levels: int = field(default=5, doc="Rows of the grid: curriculum levels from easiest (0) to hardest.")
    tile_length: float = field(default=8.0, doc="Tile size along x (the direction of travel), metres.")
    tile_width: float = field(default=8.0, doc="Tile size along y, metres.")
    border: float = field(default=4.0, doc="Flat border around the grid, metres.")
    resolution: float = field(default=0.02, doc="Cell size of the ground-truth height grid, metres.")
    rough_amplitude: tuple[float, float] = field(default=(0.01, 0.06), doc="Rough ground: peak-to-peak height, m.")
    rough_cell: float = field(default=0.1, doc="Rough ground: heightfield sample spacing, metres.")
    step_height: tuple[float, float] = field(default=(0.03, 0.12), doc="Stairs: riser height, metres.")
    step_depth: float = field(default=0.3, doc="Stairs: tread depth, metres.")
    climb_heights: list[float] = field(
        default_factory=lambda: [0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75],
        doc="Climb platforms: heights spread over the levels (the paper grows 45 -> 75 cm in 5 cm steps).",
    )
    vault_heights: list[float] = field(
        default_factory=lambda: [0.40, 0.45, 0.50], doc="Vault boxes (and shaped vaults): heights over the levels."
    )
    vault_depth: float = field(default=0.35, doc="Vault boxes: depth along x, metres.")
    platform_depth: float = field(default=1.5, doc="Climb tiles: depth of the platform along x, metres.")
    platform_goal: float = field(default=1.0, doc="Climb tiles: the goal's distance past the platform's front, m.")
    obstacle_width: float = field(default=1.6, doc="Width (along y) of climbs, vaults and course obstacles, metres.")
    stone_size: tuple[float, float] = field(default=(0.45, 0.25), doc="Stepping stones: side length, metres.")
    stone_gap: tuple[float, float] = field(default=(0.05, 0.25), doc="Stepping stones: gap between stones, metres.")
    plank_width: tuple[float, float] = field(default=(0.5, 0.2), doc="Plank bridge: width, metres.")
    gap_width: tuple[float, float] = field(default=(0.1, 0.45), doc="Gaps: width of each gap, metres.")
    pit_depth: float = field(default=0.5, doc="Depth of the pit under stones, plank and gaps, metres.")
    approach_length: float = field(default=2.5, doc="Goal tiles: distance from spawn to the first obstacle, metres.")

    def validate(self, path: str) -> None:
        check(len(self.tile_types) > 0, f"{path}.tile_types", "needs at least one tile type")
        for i, t in enumerate(self.tile_types):
            check(t in TILE_TYPES, f"{path}.tile_types[{i}]", f"got {t!r}, allowed values: {', '.join(TILE_TYPES)}")
        check(self.num_levels >= 1, f"{path}.num_levels", "must be >= 1")
        check(self.tile_length >= 4.0, f"{path}.tile_length", "must be >= 4 m (room for approach and obstacle)")
        check(self.tile_width >= 2.0, f"{path}.tile_width", "must be >= 2 m")
        check(self.border >= 0.0, f"{path}.border", "must be >= 0")
        check(0.005 <= self.resolution <= 0.1, f"{path}.resolution", "must be in [0.005, 0.1] m")
        check(self.rough_cell >= self.resolution, f"{path}.rough_cell", "must be >= resolution")
        for name in ("climb_heights", "vault_heights"):
            values = getattr(self, name)
            check(len(values) > 0 and all(v > 0 for v in values), f"{path}.{name}", "needs positive heights")
        check(self.pit_depth > 0, f"{path}.pit_depth", "must be positive")
        check(self.approach_length > 0.5, f"{path}.approach_length", "must be > 0.5 m")
        check(self.platform_depth > 0, f"{path}.platform_depth", "must be positive")
        check(self.platform_goal > 0, f"{path}.platform_goal", "must be past the platform's front edge: > 0")
        room = self.tile_length - 1.0 - self.approach_length  # from the platform's front to the tile's end
        check(max(self.platform_depth, self.platform_goal) < room, f"{path}.platform_goal",
              f"platform ({self.platform_depth} m) and goal ({self.platform_goal} m) must end within the tile: "
              f"< {room:g} m after the platform's front")  # fmt: skip


@dataclass
class Box:
    """An axis-aligned box in world coordinates."""

    center: tuple[float, float, float]
    half: tuple[float, float, float]


@dataclass
class Prism:
    """A convex prism extruded along y: ``profile`` is its (x, z) outline relative to ``center``."""

    center: tuple[float, float, float]
    profile: list[tuple[float, float]]
    half_width: float


@dataclass
class Heightfield:
    """A heightfield patch: heights [nrow (y), ncol (x)] in metres above ``center`` z."""

    center: tuple[float, float, float]
    half: tuple[float, float]
    heights: np.ndarray


@dataclass
class Obstacle:
    """Ground-truth description of one obstacle, for pairing references and judging success."""

    kind: str
    center: tuple[float, float, float]
    depth: float
    width: float
    height: float


@dataclass
class Tile:
    """One tile of the grid and everything the tasks need to know about it."""

    index: int
    level: int
    column: int
    type: str
    difficulty: float
    origin: tuple[float, float]
    spawn: tuple[float, float, float]
    spawn_yaw: float
    goal: tuple[float, float] | None
    obstacles: list[Obstacle] = dc_field(default_factory=list)
    triggers: list[float] = dc_field(default_factory=list)
    """Course x positions (world) where phases change: obstacle zone starts, after-obstacle zone starts."""


@dataclass
class Terrain:
    """The generated terrain: geometry for the simulator, a height grid for sensors, tiles for tasks."""

    config: TerrainConfig
    boxes: list[Box]
    prisms: list[Prism]
    heightfields: list[Heightfield]
    tiles: list[Tile]
    heights: np.ndarray  # [ny, nx] float32, ground height of each cell, metres
    origin: tuple[float, float]  # world (x, y) of cell [0, 0]'s corner
    resolution: float
    _padded: np.ndarray | None = None

    @property
    def num_levels(self) -> int:
        return self.config.num_levels

    @property
    def num_columns(self) -> int:
        return len(self.config.tile_types)

    def tile(self, level: int, column: int) -> Tile:
        return self.tiles[level * self.num_columns + column]

    def geometry_near(self, x0: float, x1: float, y0: float, y1: float) -> tuple[list, list, list]:
        """Boxes, prisms and heightfields whose footprint overlaps the rectangle [x0, x1] x [y0, y1]."""

        def overlaps(cx: float, cy: float, hx: float, hy: float) -> bool:
            return cx + hx >= x0 and cx - hx <= x1 and cy + hy >= y0 and cy - hy <= y1

        boxes = [b for b in self.boxes if overlaps(b.center[0], b.center[1], b.half[0], b.half[1])]
        prisms = [
            p
            for p in self.prisms
            if overlaps(p.center[0], p.center[1], max(abs(q[0]) for q in p.profile), p.half_width)
        ]
        hfields = [h for h in self.heightfields if overlaps(h.center[0], h.center[1], h.half[0], h.half[1])]
        return boxes, prisms, hfields

    def height_around(self, centers: np.ndarray, yaw: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Ground height at ``offsets`` [P, 2] rotated by ``yaw`` [N] around ``centers`` [N, 2] -> [N, P].

        The same lookup as ``height_at`` fused with the rotation, working in grid units throughout
        (this runs every policy step for every scan point of every env).
        """
        padded = self._padded_heights()
        ny, nx = padded.shape
        inv = 1.0 / self.resolution
        # float32 grid coordinates: exact to well under a cell for maps up to ~10 km across
        c = (np.cos(yaw) * inv).astype(np.float32)[:, None]
        s = (np.sin(yaw) * inv).astype(np.float32)[:, None]
        off = offsets.astype(np.float32)
        px, py = off[None, :, 0], off[None, :, 1]
        gx = ((centers[:, 0] - self.origin[0]) * inv + 1.0).astype(np.float32)[:, None] + (c * px - s * py)
        gy = ((centers[:, 1] - self.origin[1]) * inv + 1.0).astype(np.float32)[:, None] + (s * px + c * py)
        ix = np.floor(gx).astype(np.int32)
        iy = np.floor(gy).astype(np.int32)
        np.minimum(np.maximum(ix, 0, out=ix), nx - 1, out=ix)
        np.minimum(np.maximum(iy, 0, out=iy), ny - 1, out=iy)
        flat = iy.astype(np.int64)
        flat *= nx
        flat += ix
        return padded.ravel()[flat]

    def _padded_heights(self) -> np.ndarray:
        if self._padded is None:
            # one cell of pit all round, so clamped indices outside the map read "pit" with no extra mask
            self._padded = np.pad(self.heights, 1, constant_values=-self.config.pit_depth - 0.5)
        return self._padded

    def height_at(self, xy: np.ndarray) -> np.ndarray:
        """Ground height under points ``xy`` [..., 2] (nearest cell); the pit depth beyond the map's edge."""
        padded = self._padded_heights()
        ny, nx = padded.shape
        inv = 1.0 / self.resolution
        ix = np.minimum(np.maximum(np.floor((xy[..., 0] - self.origin[0]) * inv).astype(np.int64) + 1, 0), nx - 1)
        iy = np.minimum(np.maximum(np.floor((xy[..., 1] - self.origin[1]) * inv).astype(np.int64) + 1, 0), ny - 1)
        return padded.ravel()[iy * nx + ix]


def _lerp(bounds: tuple[float, float], d: float) -> float:
    return float(bounds[0] + (bounds[1] - bounds[0]) * d)


def _pick(values: list[float], d: float) -> float:
    return float(values[int(round(d * (len(values) - 1)))])


class _TileBuilder:
    """Collects the geometry of one tile in tile-local coordinates (origin at the tile centre, ground at z=0)."""

    def __init__(self, cfg: TerrainConfig, ox: float, oy: float):
        self.cfg, self.ox, self.oy = cfg, ox, oy
        self.boxes: list[Box] = []
        self.prisms: list[Prism] = []
        self.heightfields: list[Heightfield] = []
        self.obstacles: list[Obstacle] = []

    def box(self, x0: float, x1: float, y0: float, y1: float, z0: float, z1: float) -> None:
        c = (self.ox + (x0 + x1) / 2, self.oy + (y0 + y1) / 2, (z0 + z1) / 2)
        self.boxes.append(Box(c, ((x1 - x0) / 2, (y1 - y0) / 2, (z1 - z0) / 2)))

    def floor(self, top: float = 0.0) -> None:
        L, W = self.cfg.tile_length / 2, self.cfg.tile_width / 2
        self.box(-L, L, -W, W, top - 0.5, top)

    def obstacle(self, kind: str, x0: float, x1: float, width: float, height: float) -> None:
        self.obstacles.append(Obstacle(kind, (self.ox + (x0 + x1) / 2, self.oy, height / 2), x1 - x0, width, height))


def _build_tile(cfg: TerrainConfig, kind: str, d: float, b: _TileBuilder, rng: np.random.Generator) -> dict:
    """Add one tile's geometry to ``b``; return its spawn/goal/trigger layout (tile-local)."""
    L, W = cfg.tile_length / 2, cfg.tile_width / 2
    ow = min(cfg.obstacle_width, cfg.tile_width)
    start_x = -L + 1.0
    obstacle_x = start_x + cfg.approach_length
    layout = {"spawn": (0.0, 0.0), "goal": None, "triggers": []}

    if kind == "flat":
        b.floor()
    elif kind == "rough":
        amp = _lerp(cfg.rough_amplitude, d)
        n_x = int(round(cfg.tile_length / cfg.rough_cell)) + 1
        n_y = int(round(cfg.tile_width / cfg.rough_cell)) + 1
        heights = rng.uniform(0.0, amp, size=(n_y, n_x)).astype(np.float32)
        heights[:, :2] = heights[:, -2:] = heights[:2, :] = heights[-2:, :] = 0.0  # flush with neighbours
        b.heightfields.append(Heightfield((b.ox, b.oy, 0.0), (L, W), heights))
        b.box(-L, L, -W, W, -0.5, 0.0)  # support under the heightfield's base
    elif kind in ("stairs_up", "stairs_down"):
        b.floor()
        h = _lerp(cfg.step_height, d)
        n = int((min(L, W) - 1.0) / cfg.step_depth)
        if kind == "stairs_down":  # pyramid: spawn on top, walk down
            for k in range(n):
                a = min(L, W) - 0.25 - k * cfg.step_depth
                b.box(-a, a, -a, a, 0.0, (k + 1) * h)
        else:  # inverted pyramid: spawn in the pit, climb out
            for k in range(n):
                inner = 0.75 + k * cfg.step_depth
                outer = inner + cfg.step_depth
                top = (k + 1) * h
                b.box(-outer, outer, inner, outer, 0.0, top)
                b.box(-outer, outer, -outer, -inner, 0.0, top)
                b.box(inner, outer, -inner, inner, 0.0, top)
                b.box(-outer, -inner, -inner, inner, 0.0, top)
            rim = 0.75 + n * cfg.step_depth
            top = n * h
            b.box(-L, L, rim, W, 0.0, top)
            b.box(-L, L, -W, -rim, 0.0, top)
            b.box(rim, L, -rim, rim, 0.0, top)
            b.box(-L, -rim, -rim, rim, 0.0, top)
        b.obstacles.append(Obstacle("stairs", (b.ox, b.oy, n * h / 2), 2 * (0.75 + n * cfg.step_depth), 0.0, n * h))
    elif kind == "climb":
        b.floor()
        h = _pick(cfg.climb_heights, d)
        depth = cfg.platform_depth
        b.box(obstacle_x, obstacle_x + depth, -ow / 2, ow / 2, 0.0, h)
        b.obstacle("platform", obstacle_x, obstacle_x + depth, ow, h)
        layout["goal"] = (obstacle_x + cfg.platform_goal, 0.0)
        layout["triggers"] = [obstacle_x - 0.6, obstacle_x + 0.75]
    elif kind in ("vault", "trapezoid_vault", "saddle_vault"):
        b.floor()
        h = _pick(cfg.vault_heights, d)
        x0, x1 = obstacle_x, obstacle_x + cfg.vault_depth
        if kind == "vault":
            b.box(x0, x1, -ow / 2, ow / 2, 0.0, h)
            b.obstacle("box", x0, x1, ow, h)
        elif kind == "trapezoid_vault":
            bottom, top = cfg.vault_depth * 1.6, cfg.vault_depth * 0.8
            x1 = x0 + bottom
            profile = [(-bottom / 2, 0.0), (bottom / 2, 0.0), (top / 2, h), (-top / 2, h)]
            b.prisms.append(Prism((b.ox + (x0 + x1) / 2, b.oy, 0.0), profile, ow / 2))
            b.obstacle("trapezoid", x0, x1, ow, h)
        else:  # saddle: lowest in the middle of its width, rising quadratically to +12 cm at the sides
            slabs = 7
            for i in range(slabs):
                y0 = -ow / 2 + i * ow / slabs
                yc = (y0 + ow / (2 * slabs)) / (ow / 2)
                b.box(x0, x1, y0, y0 + ow / slabs, 0.0, h + 0.12 * yc**2)
            b.obstacle("saddle", x0, x1, ow, h)
        layout["goal"] = (x1 + 2.0, 0.0)
        layout["triggers"] = [x0 - 0.6, x1 + 0.3]
    elif kind == "stepping_stones":
        b.floor(-cfg.pit_depth)
        size, gap = _lerp(cfg.stone_size, d), _lerp(cfg.stone_gap, d)
        b.box(-L, obstacle_x, -W, W, -cfg.pit_depth, 0.0)
        end_x = L - 1.5
        b.box(end_x, L, -W, W, -cfg.pit_depth, 0.0)
        x = obstacle_x + gap
        lanes = np.arange(-ow / 2 + size / 2, ow / 2 - size / 2 + 1e-6, size + gap)
        while x + size <= end_x - gap + 1e-6:
            for y in lanes:
                jitter = rng.uniform(-0.3, 0.3) * gap
                b.box(x + jitter, x + jitter + size, y - size / 2, y + size / 2, -cfg.pit_depth, 0.0)
            x += size + gap
        b.obstacle("stones", obstacle_x, end_x, ow, cfg.pit_depth)
        layout["goal"] = (end_x + 0.75, 0.0)
        layout["triggers"] = [obstacle_x - 0.3, end_x]
    elif kind == "plank":
        b.floor(-cfg.pit_depth)
        w = _lerp(cfg.plank_width, d)
        end_x = L - 1.5
        b.box(-L, obstacle_x, -W, W, -cfg.pit_depth, 0.0)
        b.box(obstacle_x, end_x, -w / 2, w / 2, -cfg.pit_depth, 0.0)
        b.box(end_x, L, -W, W, -cfg.pit_depth, 0.0)
        b.obstacle("plank", obstacle_x, end_x, w, cfg.pit_depth)
        layout["goal"] = (end_x + 0.75, 0.0)
        layout["triggers"] = [obstacle_x - 0.3, end_x]
    elif kind == "gaps":
        b.floor(-cfg.pit_depth)
        g = _lerp(cfg.gap_width, d)
        x = -L
        gap_starts = np.arange(obstacle_x, L - 1.5, 1.2)
        for gx in gap_starts:
            b.box(x, gx, -W, W, -cfg.pit_depth, 0.0)
            b.obstacle("gap", gx, gx + g, cfg.tile_width, cfg.pit_depth)
            x = gx + g
        b.box(x, L, -W, W, -cfg.pit_depth, 0.0)
        layout["goal"] = (L - 1.0, 0.0)
        layout["triggers"] = [obstacle_x - 0.3, float(gap_starts[-1] + g)]
    elif kind in ("course", "course_succession"):
        # transition courses: approach area, obstacle zone, after-obstacle area
        b.floor()
        skill = ("climb", "vault")[int(rng.integers(2))] if kind == "course" else "vault"
        h_v = _pick(cfg.vault_heights, d)
        x = obstacle_x
        if skill == "vault":
            b.box(x, x + cfg.vault_depth, -ow / 2, ow / 2, 0.0, h_v)
            b.obstacle("box", x, x + cfg.vault_depth, ow, h_v)
            x_end = x + cfg.vault_depth
        else:
            h_c = _pick(cfg.climb_heights, d)
            b.box(x, x + 1.2, -ow / 2, ow / 2, 0.0, h_c)
            b.obstacle("platform", x, x + 1.2, ow, h_c)
            x_end = x + 1.2
        if kind == "course_succession":  # a climb 1.2 m after the vault: obstacles in close succession
            h_c = _pick(cfg.climb_heights, d)
            x2 = x_end + 1.2
            b.box(x2, x2 + 1.2, -ow / 2, ow / 2, 0.0, h_c)
            b.obstacle("platform", x2, x2 + 1.2, ow, h_c)
            x_end = x2 + 1.2
        layout["goal"] = (min(x_end + 1.5, L - 0.5), 0.0)
        layout["triggers"] = [obstacle_x - 0.6, x_end]
    else:  # pragma: no cover - validated in TerrainConfig
        raise ValueError(kind)

    if kind in GOAL_TYPES:
        layout["spawn"] = (start_x, 0.0)
    return layout


def level_fraction(level: int, num_levels: int) -> float:
    """Where level ``level`` sits between the easiest (0) and the hardest (1) size of each range."""
    return level / (num_levels - 1) if num_levels > 1 else 1.0


def difficulty(cfg: TerrainConfig, kind: str, level: int) -> str:
    """A tile's difficulty in the paper's units (obstacle heights in cm), for evaluation tables."""
    d = level_fraction(level, cfg.num_levels)
    cm = lambda metres: f"{100 * metres:.1f}".rstrip("0").rstrip(".") + " cm"  # noqa: E731  (27.5 cm, 60 cm)
    if kind == "rough":
        return f"amplitude {100 * _lerp(cfg.rough_amplitude, d):.1f} cm"
    if kind in ("stairs_up", "stairs_down"):
        return f"step {100 * _lerp(cfg.step_height, d):.1f} cm"
    if kind == "climb":
        return cm(_pick(cfg.climb_heights, d))
    if kind in ("vault", "trapezoid_vault", "saddle_vault"):
        return cm(_pick(cfg.vault_heights, d))
    if kind == "stepping_stones":
        return f"stones {cm(_lerp(cfg.stone_size, d))}, gaps {cm(_lerp(cfg.stone_gap, d))}"
    if kind == "plank":
        return f"width {cm(_lerp(cfg.plank_width, d))}"
    if kind == "gaps":
        return f"gap {cm(_lerp(cfg.gap_width, d))}"
    if kind in ("course", "course_succession"):
        return f"vault {cm(_pick(cfg.vault_heights, d))}, climb {cm(_pick(cfg.climb_heights, d))}"
    return "-"


def _rasterize(terrain_heights: np.ndarray, origin: tuple[float, float], res: float, boxes, prisms, hfields) -> None:
    ny, nx = terrain_heights.shape

    def cells(x0: float, x1: float, y0: float, y1: float) -> tuple[slice, slice]:
        # cells whose centres lie inside [x0, x1) x [y0, y1)
        i0 = int(np.ceil((x0 - origin[0]) / res - 0.5))
        i1 = int(np.ceil((x1 - origin[0]) / res - 0.5))
        j0 = int(np.ceil((y0 - origin[1]) / res - 0.5))
        j1 = int(np.ceil((y1 - origin[1]) / res - 0.5))
        return slice(max(j0, 0), min(j1, ny)), slice(max(i0, 0), min(i1, nx))

    for hf in hfields:
        cx, cy, cz = hf.center
        sy, sx = cells(cx - hf.half[0], cx + hf.half[0], cy - hf.half[1], cy + hf.half[1])
        xs = origin[0] + (np.arange(sx.start, sx.stop) + 0.5) * res
        ys = origin[1] + (np.arange(sy.start, sy.stop) + 0.5) * res
        nrow, ncol = hf.heights.shape
        u = (xs - (cx - hf.half[0])) / (2 * hf.half[0]) * (ncol - 1)
        v = (ys - (cy - hf.half[1])) / (2 * hf.half[1]) * (nrow - 1)
        u0 = np.clip(np.floor(u).astype(int), 0, ncol - 2)
        v0 = np.clip(np.floor(v).astype(int), 0, nrow - 2)
        fu, fv = (u - u0)[None, :], (v - v0)[:, None]
        h = hf.heights
        patch = (
            h[v0][:, u0] * (1 - fu) * (1 - fv)
            + h[v0][:, u0 + 1] * fu * (1 - fv)
            + h[v0 + 1][:, u0] * (1 - fu) * fv
            + h[v0 + 1][:, u0 + 1] * fu * fv
        )
        terrain_heights[sy, sx] = np.maximum(terrain_heights[sy, sx], cz + patch)
    for box in boxes:
        (cx, cy, cz), (hx, hy, hz) = box.center, box.half
        sy, sx = cells(cx - hx, cx + hx, cy - hy, cy + hy)
        terrain_heights[sy, sx] = np.maximum(terrain_heights[sy, sx], cz + hz)
    for prism in prisms:
        cx, cy, cz = prism.center
        xs_p = [p[0] for p in prism.profile]
        sy, sx = cells(cx + min(xs_p), cx + max(xs_p), cy - prism.half_width, cy + prism.half_width)
        xs = origin[0] + (np.arange(sx.start, sx.stop) + 0.5) * res - cx
        top = _profile_top(prism.profile, xs)
        terrain_heights[sy, sx] = np.maximum(terrain_heights[sy, sx], cz + top[None, :])


def _profile_top(profile: list[tuple[float, float]], xs: np.ndarray) -> np.ndarray:
    """Upper envelope z(x) of a convex (x, z) outline."""
    pts = sorted(profile, key=lambda p: (p[0], -p[1]))
    upper: list[tuple[float, float]] = []
    for p in pts:  # monotone chain, upper hull
        while len(upper) >= 2:
            (x1, z1), (x2, z2) = upper[-2], upper[-1]
            if (x2 - x1) * (p[1] - z1) - (z2 - z1) * (p[0] - x1) >= 0:
                upper.pop()
            else:
                break
        upper.append(p)
    hx = np.array([p[0] for p in upper])
    hz = np.array([p[1] for p in upper])
    return np.interp(xs, hx, hz)


def generate_terrain(cfg: TerrainConfig, seed: int = 0) -> Terrain:
    """Lay out the tile grid for ``cfg``; the same seed always gives the same terrain."""
    rng = np.random.default_rng(seed)
    cols, rows = len(cfg.tile_types), cfg.num_levels
    size_x, size_y = cols * cfg.tile_length, rows * cfg.tile_width
    boxes: list[Box] = []
    prisms: list[Prism] = []
    hfields: list[Heightfield] = []
    tiles: list[Tile] = []
    layouts = []
    for level in range(rows):
        d = level_fraction(level, rows)
        for col, kind in enumerate(cfg.tile_types):
            ox = (col + 0.5) * cfg.tile_length
            oy = (level + 0.5) * cfg.tile_width
            b = _TileBuilder(cfg, ox, oy)
            layout = _build_tile(cfg, kind, d, b, rng)
            boxes += b.boxes
            prisms += b.prisms
            hfields += b.heightfields
            layouts.append(layout)
            tiles.append(
                Tile(
                    index=len(tiles),
                    level=level,
                    column=col,
                    type=kind,
                    difficulty=d,
                    origin=(ox, oy),
                    spawn=(ox + layout["spawn"][0], oy + layout["spawn"][1], 0.0),
                    spawn_yaw=0.0,
                    goal=None if layout["goal"] is None else (ox + layout["goal"][0], oy + layout["goal"][1]),
                    obstacles=b.obstacles,
                    triggers=[ox + t for t in layout["triggers"]],
                )
            )
    # border: flat ground around the grid
    B = cfg.border
    if B > 0:
        for x0, x1, y0, y1 in (
            (-B, size_x + B, -B, 0.0),
            (-B, size_x + B, size_y, size_y + B),
            (-B, 0.0, 0.0, size_y),
            (size_x, size_x + B, 0.0, size_y),
        ):
            boxes.append(Box(((x0 + x1) / 2, (y0 + y1) / 2, -0.25), ((x1 - x0) / 2, (y1 - y0) / 2, 0.25)))
    res = cfg.resolution
    origin = (-B, -B)
    nx = int(np.ceil((size_x + 2 * B) / res))
    ny = int(np.ceil((size_y + 2 * B) / res))
    heights = np.full((ny, nx), -cfg.pit_depth - 0.5, dtype=np.float32)
    _rasterize(heights, origin, res, boxes, prisms, hfields)
    terrain = Terrain(cfg, boxes, prisms, hfields, tiles, heights, origin, res)
    for tile in tiles:
        z = float(terrain.height_at(np.array(tile.spawn[:2]))[()])
        tile.spawn = (tile.spawn[0], tile.spawn[1], z)
    return terrain
