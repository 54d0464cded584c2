"""MuJoCo Warp behind the part of ``mujoco.batch.Batch`` the envs use (``sim.backend: warp``).

All envs are worlds of one Warp model: the robot and the whole terrain
(``scene.world_model``), each robot on its own tile. ``bind(name)`` gives the
same (N, ...) arrays as ``Batch.bind``: on the CPU they are views of Warp's
own memory (no copies); on a GPU they are host mirrors, pushed to the device
before each call (the state fields the env writes: qpos, qvel, ctrl) and
pulled after it. Per-env physics parameters (domain randomisation) are
per-world model fields (``params``), not private model copies.

On a GPU the decimation's physics steps run as one captured CUDA graph.
``tensor(name)`` and ``param_tensor(name)`` give torch views of the same memory
on its own device (``wp.to_torch``, no copies): the device env
(``llp.sim.device_env``) computes the task there and never binds mirrors.
"""

from __future__ import annotations

import numpy as np

STATE_FIELDS = ("qpos", "qvel", "ctrl")  # what the env writes; everything else it reads
# model fields that domain randomisation sets per env (per world)
PARAM_FIELDS = ("geom_friction", "body_mass", "actuator_gainprm", "actuator_biasprm")
STAGE_POS = 1  # mujoco.mjtStage.mjSTAGE_POS: kinematics at the new state (TrackingEnv reads xpos)


def _flat(view: np.ndarray, n: int, name: str) -> np.ndarray:
    """Warp's vector and matrix elements as trailing axes; matrices flat, as MjData holds them (xmat: 9)."""
    if name.endswith("xmat") and view.ndim == 4:
        return view.reshape(n, view.shape[1], 9)
    return view


class WarpBatch:
    """``num_envs`` worlds of ``model`` on MuJoCo Warp (``device``: "cpu" or "cuda[:k]")."""

    def __init__(self, model, num_envs: int, device: str = "cpu", params: bool = False):
        import mujoco_warp as mjw
        import warp as wp

        wp.config.quiet = True
        wp.init()
        self.wp, self.mjw, self.mjm = wp, mjw, model
        if device != "cpu" and not wp.is_cuda_available():
            raise RuntimeError(f"sim.device {device}: Warp finds no CUDA device on this machine")
        self.device = wp.get_device(device)
        self.num_envs = num_envs
        self.host = self.device.is_cpu  # bound arrays are Warp's memory itself
        with wp.ScopedDevice(self.device):
            sizes = {name: num_envs for name in PARAM_FIELDS} if params else None
            self.m = mjw.put_model(model, batch_sizes=sizes)
            # the solver stops at the model's iteration limit by design (MuJoCo's C engine notes it silently);
            # Warp would print a line per world and step from inside its kernels. Overflows still print.
            quiet = mjw.OverflowType.ITERATIONS | mjw.OverflowType.LS_ITERATIONS
            self.m.opt.warn_overflow = int(self.m.opt.warn_overflow) & ~int(quiet)
            self.d = mjw.make_data(model, nworld=num_envs)
            if self.device.is_cuda:  # load every kernel before a graph is captured; the state starts anew after
                mjw.step(self.m, self.d)
                mjw.kinematics(self.m, self.d)
                mjw.forward(self.m, self.d)
                mjw.reset_data(self.m, self.d)
        self._bound: dict[str, np.ndarray] = {}
        self._params: dict[str, np.ndarray] = {}
        self._graphs: dict[int, object] = {}
        self._rays: dict[int, tuple] = {}  # ray count -> output buffers

    # ------------------------------------------------------------------ arrays
    def bind(self, name: str) -> np.ndarray:
        """A live (N, ...) array over a Data field (float32: Warp's precision)."""
        if name not in self._bound:
            source = getattr(self.d, name)
            view = source.numpy()  # on the CPU a view of Warp's memory, on a GPU a copy
            self._bound[name] = _flat(view, self.num_envs, name)
        return self._bound[name]

    def params(self, name: str) -> np.ndarray:
        """A live (N, ...) array over a per-world model field (one of PARAM_FIELDS); ``commit_params`` after
        writing it."""
        if name not in self._params:
            if getattr(self.m, name).shape[0] != self.num_envs:
                raise RuntimeError(f"{name} is not per world: build the batch with params=True")
            self._params[name] = getattr(self.m, name).numpy()
        return self._params[name]

    def tensor(self, name: str):
        """A torch view (N, ...) of a Data field on Warp's device: reads and writes go to Warp's memory itself."""
        return self.wp.to_torch(getattr(self.d, name))

    def param_tensor(self, name: str):
        """A torch view (N, ...) of a per-world model field (one of PARAM_FIELDS); writes take effect at once."""
        if getattr(self.m, name).shape[0] != self.num_envs:
            raise RuntimeError(f"{name} is not per world: build the batch with params=True")
        return self.wp.to_torch(getattr(self.m, name))

    def reset_where(self, mask) -> None:
        """Reset the worlds where the torch bool tensor ``mask`` [N] (on Warp's device) is true; no forward."""
        with self.wp.ScopedDevice(self.device):
            self.mjw.reset_data(self.m, self.d, reset=self.wp.from_torch(mask, dtype=self.wp.bool))

    def rays(self, pnt, vec, group: int):
        """Distances [N, P] along rays from ``pnt`` in directions ``vec`` (torch [N, P, 3] on Warp's device, unit
        directions) to the nearest visible geom of geom group ``group`` in each world; -1 where none is hit."""
        wp = self.wp
        n, p = pnt.shape[0], pnt.shape[1]
        out = self._rays.get(p)
        if out is None:
            import torch
            from mujoco_warp._src.types import vec6

            dist = torch.empty((n, p), dtype=torch.float32, device=pnt.device)
            with wp.ScopedDevice(self.device):
                extra = (wp.empty((n, p), dtype=int), wp.empty((n, p), dtype=wp.vec3), wp.full(p, -1, dtype=int))
            mask = vec6(*[1.0 if g == group else 0.0 for g in range(6)])
            out = self._rays[p] = (dist, wp.from_torch(dist), extra, mask)
        dist, dist_wp, (geomid, normal, exclude), mask = out
        with wp.ScopedDevice(self.device):
            self.mjw.rays(self.m, self.d, wp.from_torch(pnt.contiguous(), dtype=wp.vec3),
                          wp.from_torch(vec.contiguous(), dtype=wp.vec3), mask, True, exclude, dist_wp, geomid,
                          normal)  # fmt: skip
        return dist

    def commit_params(self) -> None:
        if not self.host:
            for name, mirror in self._params.items():
                getattr(self.m, name).assign(mirror)

    def _push(self) -> None:
        if not self.host:
            for name in STATE_FIELDS:
                if name in self._bound:
                    getattr(self.d, name).assign(self._bound[name])

    def _pull(self) -> None:
        if not self.host:
            for name, mirror in self._bound.items():
                mirror[...] = _flat(getattr(self.d, name).numpy(), self.num_envs, name)

    # ------------------------------------------------------------------ calls
    def step(self, ids=None, nstep: int = 1, stage: int = 0) -> None:
        """``nstep`` physics steps of every world (``ids`` must be None: worlds step together)."""
        if ids is not None:
            raise ValueError("the Warp backend steps every env together")
        self._push()
        with self.wp.ScopedDevice(self.device):
            if self.device.is_cuda:
                graph = self._graphs.get(nstep)
                if graph is None:
                    with self.wp.ScopedCapture() as capture:
                        self._steps(nstep)
                    graph = self._graphs[nstep] = capture.graph
                self.wp.capture_launch(graph)
            else:
                self._steps(nstep)
            if stage == STAGE_POS:
                self.mjw.kinematics(self.m, self.d)
            elif stage > STAGE_POS:
                self.mjw.forward(self.m, self.d)
        self._pull()

    def _steps(self, nstep: int) -> None:
        for _ in range(nstep):
            self.mjw.step(self.m, self.d)

    def reset(self, ids=None, stage: int = 3) -> None:
        """Reset worlds ``ids`` (None: all) to the model's defaults; ``stage`` > 0 runs forward after it."""
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[slice(None) if ids is None else np.asarray(ids)] = True
        with self.wp.ScopedDevice(self.device):
            self.mjw.reset_data(self.m, self.d, reset=self.wp.array(mask, dtype=bool))
        self._pull()
        if stage:
            self.forward(ids)

    def forward(self, ids=None, stage: int = 3) -> None:
        """Recompute derived fields at the current state: of every world (Warp runs them together; the state of
        worlds outside ``ids`` is unchanged)."""
        self._push()
        with self.wp.ScopedDevice(self.device):
            self.mjw.forward(self.m, self.d)
        self._pull()
