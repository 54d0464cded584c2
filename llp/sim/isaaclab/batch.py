"""Isaac Lab 3 on Newton behind the part of ``mujoco.batch.Batch`` the envs use (``sim.backend: isaaclab``).

The envs keep their task (observations, rewards, terminations, commands, curriculum, randomisation draws,
height scan): one code path for every backend, so a policy trained here runs unchanged on MuJoCo. Isaac Lab
simulates: an ``InteractiveScene`` of the robot's articulation (its USD, with the drives of the MuJoCo model
the env compiled), a ``ContactSensor`` on every body, and the model's terrain geoms added to Newton's
builder as static shapes (boxes, convex prisms, heightfields), stepped by Newton's MuJoCo Warp solver with
the model's solver options.

``bind(name)`` gives host arrays in MuJoCo's layout, filled from Isaac Lab's data after every call:

- ``qpos``/``qvel``: the root link's pose and velocity (quaternion w, x, y, z; linear velocity in the world,
  angular in the body frame, as MuJoCo's free joint) and the joints, by name;
- ``sensordata``: each body's net contact force (the contact sensor) and each site's linear velocity;
- ``xpos``, ``site_xpos``, ``site_xmat``: from the bodies' link poses and the sites' offsets in the model.

The env writes ``qpos``/``qvel`` (resets, pushes) and ``ctrl`` (position targets); rows that changed since
the last read go to Isaac Lab before the next step. Runs only in Isaac Lab's environment (Python 3.12):
the simulator actors reach it through ``llp.sim.remote_env`` (docs/isaaclab.md).
"""

from __future__ import annotations

import mujoco
import numpy as np

from llp.sim.robot import TERRAIN_GROUP

PARAM_FIELDS = ("geom_friction", "body_mass", "actuator_gainprm", "actuator_biasprm")
_FIELDS = ("qpos", "qvel", "ctrl", "sensordata", "xpos", "site_xpos", "site_xmat")


def quat_matrices(q: np.ndarray) -> np.ndarray:
    """Rotation matrices [..., 3, 3] of unit quaternions [..., 4] in w, x, y, z order."""
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)  # fmt: skip


def terrain_shapes(model: mujoco.MjModel) -> list[tuple]:
    """The model's terrain geoms as (kind, position [3], data): ("box", pos, half sizes), ("convex", pos,
    (vertices, faces)), ("hfield", pos, (heights [nrow, ncol] in metres, half x, half y))."""
    shapes = []
    for g in range(model.ngeom):
        if model.geom_bodyid[g] != 0 or model.geom_group[g] != TERRAIN_GROUP or not model.geom_conaffinity[g]:
            continue
        pos, kind = model.geom_pos[g].copy(), model.geom_type[g]
        if not np.allclose(model.geom_quat[g], (1, 0, 0, 0)):
            raise ValueError(f"terrain geom {g} is rotated; the isaaclab backend takes axis-aligned terrain")
        if kind == mujoco.mjtGeom.mjGEOM_BOX:
            shapes.append(("box", pos, model.geom_size[g].copy()))
        elif kind == mujoco.mjtGeom.mjGEOM_MESH:
            m = model.geom_dataid[g]
            v0, nv = model.mesh_vertadr[m], model.mesh_vertnum[m]
            f0, nf = model.mesh_faceadr[m], model.mesh_facenum[m]
            # MuJoCo re-centres a mesh on its centroid and puts the geom there (mesh_pos/quat are the offsets)
            verts = model.mesh_vert[v0 : v0 + nv].astype(np.float64)
            shapes.append(("convex", pos, (verts, model.mesh_face[f0 : f0 + nf].astype(np.int32))))
        elif kind == mujoco.mjtGeom.mjGEOM_HFIELD:
            h = model.geom_dataid[g]
            nrow, ncol = model.hfield_nrow[h], model.hfield_ncol[h]
            hx, hy, top, _ = model.hfield_size[h]
            a = model.hfield_adr[h]
            heights = model.hfield_data[a : a + nrow * ncol].reshape(nrow, ncol) * top
            shapes.append(("hfield", pos, (heights.astype(np.float32), float(hx), float(hy))))
        else:
            raise ValueError(f"terrain geom {g} has type {kind}, which the isaaclab backend does not convert")
    return shapes


class IsaacLabBatch:
    """``num_envs`` copies of robot ``robot`` (compiled in ``model``) on ``model``'s terrain in Isaac Lab."""

    def __init__(self, model: mujoco.MjModel, num_envs: int, robot: str, device: str = "cpu",
                 params: bool = False):  # fmt: skip
        import isaaclab.sim as sim_utils
        import newton
        import torch
        import warp as wp
        from isaaclab.physics import PhysicsEvent
        from isaaclab.scene import InteractiveScene, InteractiveSceneCfg
        from isaaclab.sensors import ContactSensorCfg
        from isaaclab.utils import configclass
        from isaaclab_newton.physics import MJWarpSolverCfg, NewtonCfg, NewtonManager
        from isaaclab_newton.physics.newton_manager_cfg import NewtonBuilderCfg

        from llp.sim.isaaclab.articulation import robot_cfg
        from llp.sim.scene import TERRAIN_FRICTION

        self.torch, self.wp, self.mjm = torch, wp, model
        self.num_envs, self.device = num_envs, "cpu" if device == "cpu" else device
        self.dt = float(model.opt.timestep)
        integrator = {mujoco.mjtIntegrator.mjINT_IMPLICITFAST: "implicitfast", mujoco.mjtIntegrator.mjINT_EULER:
                      "euler", mujoco.mjtIntegrator.mjINT_IMPLICIT: "implicit"}[model.opt.integrator]  # fmt: skip
        cone = "pyramidal" if model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL else "elliptic"
        solver = MJWarpSolverCfg(iterations=int(model.opt.iterations), ls_iterations=int(model.opt.ls_iterations),
                                 integrator=integrator, cone=cone, tolerance=float(model.opt.tolerance))  # fmt: skip
        physics = NewtonCfg(solver_cfg=solver)
        if sim_utils.SimulationContext.instance() is not None:
            raise RuntimeError("Isaac Lab holds one simulation per process: close the other env first (env.close())")
        self.sim = sim_utils.SimulationContext(sim_utils.SimulationCfg(dt=self.dt, device=self.device, physics=physics))
        shapes = terrain_shapes(model)

        def add_terrain(_payload=None):
            builder = self.sim.get_or_create_backend(NewtonBuilderCfg(physics_cfg=self.sim.cfg.physics))
            cfg = newton.ModelBuilder.ShapeConfig(mu=TERRAIN_FRICTION[0], mu_torsional=TERRAIN_FRICTION[1],
                                                  mu_rolling=TERRAIN_FRICTION[2], gap=0.0)  # fmt: skip
            for i, (kind, pos, data) in enumerate(shapes):
                xform = wp.transform(tuple(float(x) for x in pos), wp.quat_identity())
                if kind == "box":
                    hx, hy, hz = (float(x) for x in data)
                    builder.add_shape_box(body=-1, xform=xform, hx=hx, hy=hy, hz=hz, cfg=cfg, label=f"terrain_box{i}")
                elif kind == "convex":
                    verts, faces = data
                    mesh = newton.Mesh(vertices=verts.astype(np.float32), indices=faces.ravel())
                    builder.add_shape_convex_hull(body=-1, xform=xform, mesh=mesh, cfg=cfg, label=f"terrain_mesh{i}")
                else:
                    heights, hx, hy = data
                    field = newton.Heightfield(data=heights, nrow=heights.shape[0], ncol=heights.shape[1], hx=hx,
                                               hy=hy, min_z=0.0, max_z=max(float(heights.max()), 1e-6))  # fmt: skip
                    builder.add_shape_heightfield(xform=xform, heightfield=field, cfg=cfg, label=f"terrain_hf{i}")

        self._terrain_hook = NewtonManager.register_callback(add_terrain, PhysicsEvent.MODEL_INIT, wrap_weak_ref=False)
        articulation = robot_cfg(robot, model=model)

        @configclass
        class SceneCfg(InteractiveSceneCfg):
            robot = articulation
            contacts = ContactSensorCfg(prim_path="{ENV_REGEX_NS}/Robot/.*", history_length=0)

        # every env is a world of its own: robots on the shared terrain never touch, wherever they stand
        self.scene = InteractiveScene(SceneCfg(num_envs=num_envs, env_spacing=0.0))
        self.sim.reset()
        # the solver stops at the model's iteration limits by design (MuJoCo's C engine notes it silently); MuJoCo
        # Warp would print a line per world and step. (This version's switch also silences contact overflows.)
        mjw_model = getattr(NewtonManager._solver, "mjw_model", None)
        if mjw_model is not None:
            mjw_model.opt.warn_overflow = False
        self.art, self.contacts = self.scene["robot"], self.scene["contacts"]
        self._index_maps()
        self._arrays = {
            "qpos": np.zeros((num_envs, model.nq)),
            "qvel": np.zeros((num_envs, model.nv)),
            "ctrl": np.zeros((num_envs, model.nu)),
            "sensordata": np.zeros((num_envs, model.nsensordata)),
            "xpos": np.zeros((num_envs, model.nbody, 3)),
            "site_xpos": np.zeros((num_envs, model.nsite, 3)),
            "site_xmat": np.zeros((num_envs, model.nsite, 9)),
        }
        self._params = {}
        if params:
            self._params = {n: np.repeat(getattr(model, n)[None], num_envs, axis=0) for n in PARAM_FIELDS}
            self._committed = {n: a.copy() for n, a in self._params.items()}
            mu = self.art._root_view.get_attribute("shape_material_mu", NewtonManager.get_model())
            self._mu = wp.to_torch(mu[:, 0])  # [N, robot shapes]
        self._pull()

    # ------------------------------------------------------------------ layout
    def _index_maps(self) -> None:
        m, art = self.mjm, self.art
        jid = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n) for n in art.joint_names]
        if min(jid) < 0:
            raise ValueError(f"the USD's joints {art.joint_names} are not all in the model")
        self._jq = m.jnt_qposadr[jid].astype(np.int64)
        self._jv = m.jnt_dofadr[jid].astype(np.int64)
        self._act_joint = np.array([jid.index(int(m.actuator_trnid[a, 0])) for a in range(m.nu)], dtype=np.int64)
        bodies = list(art.body_names)
        self._bodies = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, n) for n in bodies], dtype=np.int64)
        if self._bodies.min() < 1:
            raise ValueError(f"the USD's bodies {bodies} are not all in the model")
        self._site_body = np.array([bodies.index(m.body(int(b)).name) for b in m.site_bodyid], dtype=np.int64)
        self._site_pos = m.site_pos.copy()
        self._site_mat = quat_matrices(m.site_quat)
        sensor_bodies = list(self.contacts.body_names)
        self._contacts, self._site_vels = [], []  # (sensordata address, sensor body index), (address, site)
        for s in range(m.nsensor):
            kind, adr = m.sensor_type[s], int(m.sensor_adr[s])
            if kind == mujoco.mjtSensor.mjSENS_CONTACT and m.sensor_objtype[s] == mujoco.mjtObj.mjOBJ_BODY:
                self._contacts.append((adr, sensor_bodies.index(m.body(int(m.sensor_objid[s])).name)))
            elif kind == mujoco.mjtSensor.mjSENS_FRAMELINVEL and m.sensor_objtype[s] == mujoco.mjtObj.mjOBJ_SITE:
                self._site_vels.append((adr, int(m.sensor_objid[s])))
            else:
                raise ValueError(f"sensor {m.sensor(s).name!r}: the isaaclab backend reads contact and site "
                                 "velocity sensors only")  # fmt: skip

    # ------------------------------------------------------------------ arrays
    def bind(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            raise KeyError(f"the isaaclab backend gives {', '.join(_FIELDS)}, not {name!r}")
        return self._arrays[name]

    def params(self, name: str) -> np.ndarray:
        """A per-env copy of a model field (one of PARAM_FIELDS); ``commit_params`` after writing it."""
        if name not in self._params:
            raise RuntimeError(f"{name} is not per env: build the batch with params=True")
        return self._params[name]

    def commit_params(self) -> None:
        """Send the per-env fields that changed to Isaac Lab: the robot's friction (one per env: the first
        robot geom's, as the env draws one), body masses, and the drives' stiffness and damping."""
        torch, art = self.torch, self.art
        changed = {
            n: np.any((a != self._committed[n]).reshape(self.num_envs, -1), axis=1) for n, a in self._params.items()
        }
        if changed["geom_friction"].any():
            ids = np.flatnonzero(changed["geom_friction"])
            robot_geom = int(np.flatnonzero((self.mjm.geom_bodyid != 0) & (self.mjm.geom_contype != 0))[0])
            mu = self._params["geom_friction"][ids, robot_geom, 0]
            self._mu[torch.as_tensor(ids)] = torch.as_tensor(mu, dtype=torch.float32)[:, None]
            from isaaclab_newton.physics import NewtonManager
            from newton import ModelFlags

            NewtonManager.add_model_change(ModelFlags.SHAPE_PROPERTIES)
        if changed["body_mass"].any():
            ids = np.flatnonzero(changed["body_mass"])
            masses = self._params["body_mass"][ids][:, self._bodies]
            art.set_masses_index(masses=self._t(masses), env_ids=self._t(ids, torch.int32))
        gains = changed["actuator_gainprm"] | changed["actuator_biasprm"]
        if gains.any():
            ids = np.flatnonzero(gains)
            kp = np.zeros((len(ids), len(self._jq)))
            kv = np.zeros((len(ids), len(self._jq)))
            kp[:, self._act_joint] = self._params["actuator_gainprm"][ids, :, 0]
            kv[:, self._act_joint] = -self._params["actuator_biasprm"][ids, :, 2]
            env_ids = self._t(ids, torch.int32)
            art.write_joint_stiffness_to_sim_index(stiffness=self._t(kp), env_ids=env_ids)
            art.write_joint_damping_to_sim_index(damping=self._t(kv), env_ids=env_ids)
        for n, a in self._params.items():
            self._committed[n][...] = a

    def readback(self) -> dict[str, np.ndarray]:
        """What Isaac Lab holds per env: the robot's friction (its first shape's), the base mass, and each
        actuator's stiffness (actuator order), to check that the env's draws arrived."""
        base = int(np.flatnonzero(self._bodies == 1)[0])  # the model's first body after the world: the base
        out = {
            "base_mass": self.art.data.body_mass.torch[:, base].cpu().numpy().astype(np.float64),
            "kp": self.art.data.joint_stiffness.torch.cpu().numpy()[:, self._act_joint].astype(np.float64),
        }
        if self._params:
            out["friction"] = self._mu[:, 0].cpu().numpy().astype(np.float64)
        return out

    def _t(self, a: np.ndarray, dtype=None):
        return self.torch.as_tensor(np.ascontiguousarray(a), dtype=dtype or self.torch.float32, device=self.device)

    # ------------------------------------------------------------------ state
    def _pull(self) -> None:
        """Isaac Lab's state -> the MuJoCo-layout arrays."""
        d, a = self.art.data, self._arrays
        pos = d.root_link_pos_w.torch.cpu().numpy().astype(np.float64)
        xyzw = d.root_link_quat_w.torch.cpu().numpy().astype(np.float64)
        qpos, qvel = a["qpos"], a["qvel"]
        qpos[:, 0:3] = pos
        qpos[:, 3:7] = xyzw[:, [3, 0, 1, 2]]
        qpos[:, self._jq] = d.joint_pos.torch.cpu().numpy()
        qvel[:, 0:3] = d.root_link_lin_vel_w.torch.cpu().numpy()
        qvel[:, 3:6] = d.root_link_ang_vel_b.torch.cpu().numpy()
        qvel[:, self._jv] = d.joint_vel.torch.cpu().numpy()
        body_pos = d.body_link_pos_w.torch.cpu().numpy().astype(np.float64)  # [N, B, 3]
        body_mat = quat_matrices(d.body_link_quat_w.torch.cpu().numpy().astype(np.float64)[..., [3, 0, 1, 2]])
        a["xpos"][:, self._bodies] = body_pos
        sb = self._site_body
        offset = np.einsum("nsij,sj->nsi", body_mat[:, sb], self._site_pos)
        a["site_xpos"][...] = body_pos[:, sb] + offset
        a["site_xmat"][...] = np.einsum("nsij,sjk->nsik", body_mat[:, sb], self._site_mat).reshape(self.num_envs, -1, 9)
        sd = a["sensordata"]
        if self._contacts:
            forces = self.contacts.data.net_forces_w.torch.cpu().numpy()  # [N, B, 3]
            for adr, b in self._contacts:
                sd[:, adr] = np.linalg.norm(forces[:, b], axis=1) > 0
                sd[:, adr + 1 : adr + 4] = forces[:, b]
        if self._site_vels:
            lin = d.body_link_lin_vel_w.torch.cpu().numpy()
            ang = d.body_link_ang_vel_w.torch.cpu().numpy()
            for adr, s in self._site_vels:
                b = sb[s]
                sd[:, adr : adr + 3] = lin[:, b] + np.cross(ang[:, b], offset[:, s])
        self._seen_qpos, self._seen_qvel = qpos.copy(), qvel.copy()

    def _push(self, rows: np.ndarray | None = None) -> None:
        """The rows of qpos/qvel the env changed since the last read -> Isaac Lab."""
        qpos, qvel = self._arrays["qpos"], self._arrays["qvel"]
        if rows is None:
            rows = np.flatnonzero(np.any(qpos != self._seen_qpos, axis=1) | np.any(qvel != self._seen_qvel, axis=1))
        if len(rows) == 0:
            return
        torch, art = self.torch, self.art
        q, v = qpos[rows], qvel[rows]
        mat = quat_matrices(q[:, 3:7])
        ang_w = np.einsum("nij,nj->ni", mat, v[:, 3:6])
        ids = self._t(rows, torch.int32)
        art.write_root_link_pose_to_sim_index(root_pose=self._t(np.concatenate([q[:, 0:3], q[:, [4, 5, 6, 3]]], 1)),
                                              env_ids=ids)  # fmt: skip
        art.write_root_link_velocity_to_sim_index(root_velocity=self._t(np.concatenate([v[:, 0:3], ang_w], 1)),
                                                  env_ids=ids)  # fmt: skip
        art.write_joint_state_to_sim_index(position=self._t(q[:, self._jq]), velocity=self._t(v[:, self._jv]),
                                           env_ids=ids)  # fmt: skip

    # ------------------------------------------------------------------ calls
    def step(self, ids=None, nstep: int = 1, stage: int = 0) -> None:
        """``nstep`` physics steps of every env, holding ``ctrl`` as the joints' position targets."""
        if ids is not None:
            raise ValueError("the isaaclab backend steps every env together")
        self._push()
        targets = np.zeros((self.num_envs, len(self._jq)))
        targets[:, self._act_joint] = self._arrays["ctrl"]
        targets = self._t(targets)
        for _ in range(nstep):
            self.art.actuators.target_command.set_position_index(value=targets)
            self.scene.write_data_to_sim()
            self.sim.step(render=False)
            self.scene.update(self.dt)
        self._pull()

    def reset(self, ids=None, stage: int = 0) -> None:
        """Envs ``ids`` (None: all) at the model's initial state, at rest; ``stage`` > 0 refreshes the arrays."""
        rows = np.arange(self.num_envs) if ids is None else np.asarray(ids)
        self._arrays["qpos"][rows] = self.mjm.qpos0
        self._arrays["qvel"][rows] = 0.0
        self._arrays["ctrl"][rows] = 0.0
        self._push(rows)
        self.art.reset(env_ids=self._t(rows, self.torch.int32))
        if stage:
            self.forward(rows)

    def forward(self, ids=None, stage: int = 3) -> None:
        """Write the state the env set and read back every derived array (contact forces stay the last step's)."""
        self._push(None if ids is None else np.asarray(ids))
        self.scene.update(0.0)
        self._pull()

    def close(self) -> None:
        """End the simulation: Isaac Lab holds one per process, so the next batch can start."""
        from isaaclab.sim import SimulationContext
        from isaaclab_newton.physics import NewtonManager

        NewtonManager.deregister_callback(self._terrain_hook)
        SimulationContext.clear_instance()
