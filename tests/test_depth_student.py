"""The depth student's parts: its rollouts' per-env GRU state, the learning-rule switch from DAgger to RL, the
evaluation env of a policy that reads depth, and the deployable export (no decoder; ONNX and TorchScript act as
the registered PyTorch policy on a recorded sequence)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from llp.config.schema import ConfigError, build
from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
from llp.learn.models import Actor, Critic
from llp.learn.ppo import PPO
from llp.learn.rollout import RolloutCollector, Teacher
from tests.toy_envs import CueMemory

SMALL = {"terrain": {"num_levels": 2, "tile_length": 6.0, "tile_width": 6.0, "border": 1.0}}


def _student(dims: dict, obs: list[str], reconstruct: str | None = None, num_actions: int = 1) -> Actor:
    torch.manual_seed(3)
    cfg = {"obs": obs, "encoder_dims": [32], "gru_hidden": 16, "hidden_dims": [32], "decoder_dims": [16]}
    if reconstruct:
        cfg["reconstruct"] = reconstruct
    return Actor(build(ActorConfig, cfg), dims, num_actions)


def test_the_student_rollout_clears_the_gru_state_of_each_env_that_ended_and_only_that_env():
    from llp.sim.env import ParkourEnv
    from llp.skills.protocol import EvaluateConfig

    env = ParkourEnv(EvaluateConfig(env=SMALL).env_config(), 8, seed=0)
    actor = _student(env.obs_dims(), ["policy/proprio", "policy/command"], num_actions=env.num_actions)
    torch.manual_seed(0)
    actor.head = torch.nn.Linear(16, env.num_actions)  # large random actions: envs fall at different steps
    collector = RolloutCollector(env, actor, None, 100)
    ro = collector.collect()
    hidden, dones = ro.hidden, ro.dones  # hidden[t]: the state before step t, [T, layers, N, H]
    mixed = [t for t in range(ro.num_steps - 1) if bool(dones[t].any()) and not bool(dones[t].all())]
    assert mixed, "some step must end some episodes and not others"
    for t in mixed:
        ended, going = torch.nonzero(dones[t])[:, 0], torch.nonzero(~dones[t])[:, 0]
        assert float(hidden[t + 1][:, ended].abs().max()) == 0.0
        assert float(hidden[t + 1][:, going].abs().amax(dim=-1).min()) > 0.0


class Copier:  # a frozen expert: the action is the cue
    is_recurrent = False

    def observe(self, obs):
        return obs["teacher"]["cue"]

    def initial_memory(self, n):
        from llp.learn.memory import Memory

        return Memory()

    def step(self, frame, memory):
        return frame[:, :1], memory, None


def test_pure_dagger_fits_the_critic_and_set_rule_switches_to_rl_with_a_fresh_learning_rate():
    env = CueMemory(num_envs=16, horizon=5)
    actor = _student(env.obs_dims(), ["policy/cue"])
    critic = Critic(build(CriticConfig, {"obs": ["teacher/cue"], "hidden_dims": [16]}), env.obs_dims())

    distill = build(PPOConfig, {"num_steps": 10, "rl_coef": 0.0, "dagger_coef": 1.0, "learning_rate": 1e-3,
                                "schedule": "fixed"})  # fmt: skip
    ppo = PPO(actor, critic, distill)
    collector = RolloutCollector(env, actor, critic, 10, teachers=[Teacher(Copier(), torch.arange(16))])
    before = [p.clone() for p in critic.parameters()]
    metrics = ppo.update(collector.collect())
    assert metrics["loss/value"] > 0 and "loss/surrogate" not in metrics  # the critic learns, no RL term
    assert any(not torch.equal(a, b) for a, b in zip(before, critic.parameters()))
    ppo.set_rule(build(PPOConfig, {"num_steps": 10, "learning_rate": 3e-4}), fresh_learning_rate=True)
    assert ppo.learning_rate == 3e-4 and all(g["lr"] == 3e-4 for g in ppo.optimizer.param_groups)
    metrics = ppo.update(collector.collect())
    assert "loss/surrogate" in metrics and "loss/dagger" not in metrics
    ppo.set_rule(build(PPOConfig, {"num_steps": 10, "learning_rate": 1e-2}), fresh_learning_rate=False)
    assert ppo.learning_rate != 1e-2  # a resumed phase keeps the rate its checkpoint restored


def test_the_evaluation_env_gives_a_depth_policy_its_image_through_its_camera():
    from llp.skills.protocol import EvaluateConfig

    spec = {
        "obs": ["policy/proprio", "depth/depth"],
        "camera": {"depth_camera": {"width": 16, "height": 9}, "camera_model": {"perfect": False, "scale": 0.03}},
    }
    cfg = EvaluateConfig(env=SMALL)
    env = cfg.env_config(policy_spec=spec)
    assert env.observations["depth"] == ["depth"] and "height_scan" in env.observations["policy"]
    assert (env.depth_camera.width, env.depth_camera.height) == (16, 9)
    assert env.camera_model.perfect is False and env.camera_model.scale == 0.03
    plain = cfg.env_config(policy_spec={"obs": ["policy/proprio", "policy/height_scan"]})
    assert plain.observations == cfg.env_config().observations and plain.camera_model.perfect
    # the evaluation's own camera wins (perfect_camera: trained perfect, tested through the camera model)
    perfect = {**spec, "camera": {"camera_model": {"perfect": True}}}
    real = EvaluateConfig(env={**SMALL, "camera_model": {"perfect": False}}).env_config(policy_spec=perfect)
    assert real.camera_model.perfect is False and real.observations["depth"] == ["depth"]


@pytest.mark.parametrize("name", ["no_gru", "no_finetune", "perfect_camera"])
def test_the_depth_student_ablations_change_only_that_stage_and_what_they_name(name):
    from llp.config.ablation import load_ablation
    from llp.config.pipeline import resolved
    from llp.stages.registry import load_pipeline, stage_config

    ablation = load_ablation(name)
    base, varied = load_pipeline("smoke"), load_pipeline("smoke", ablation.sets)
    assert ablation.stage == "depth_student"
    for stage in base.stages:  # every other stage's config (and so its cache key) is untouched
        same = resolved(base)["stages"][stage] == resolved(varied)["stages"][stage]
        assert same == (stage != "depth_student"), stage
    cfg = stage_config(varied, "depth_student")
    if name == "no_gru":
        dims = {"policy": {"proprio": 5, "command": 3, "gait_clock": 2}, "depth": {"depth": 6}}
        actor = Actor(cfg.actor, dims, 4)
        assert not actor.is_recurrent and actor.decoder is None and cfg.distill.recon_coef == 0
    elif name == "no_finetune":
        assert cfg.finetune_iterations == 0
    else:
        assert cfg.env["camera_model"]["perfect"] is True
        assert cfg.evaluation.env_config().camera_model.perfect is False


@pytest.mark.parametrize(
    "override, where",
    [
        ({"finetune": {"num_steps": 12}}, "finetune.num_steps"),
        ({"actor": {"gru_hidden": 0}}, "actor.reconstruct"),
        ({"actor": {"gru_hidden": 0, "reconstruct": None}}, "distill.recon_coef"),
        ({"actor": {"reconstruct": "policy/nothing"}}, "actor.reconstruct"),
        ({"finetune": {"rl_coef": 0.0, "dagger_coef": 1.0}}, "finetune.rl_coef"),
        ({"actor": {"obs": ["policy/proprio", "cam/depth"]}}, "actor.obs[1]"),
        ({"guided_iterations": 2, "distill": {"teacher_drives": 0.0}}, "distill.teacher_drives"),
        ({"guided_iterations": 10**6, "distill": {"teacher_drives": 0.5}}, "guided_iterations"),
        ({"distill": {"teacher_drives": 1.5}}, "distill.teacher_drives"),
    ],
)
def test_a_bad_depth_student_config_names_its_field(override, where):
    from llp.config.pipeline import load_pipeline, resolved
    from llp.config.schema import merge
    from llp.stages.depth_student import DepthStudentConfig

    base = resolved(load_pipeline("smoke"))["stages"]["depth_student"]
    build(DepthStudentConfig, base, "stages.depth_student")  # the smoke profile's own is valid
    with pytest.raises(ConfigError) as err:
        build(DepthStudentConfig, merge(base, override), "stages.depth_student")
    assert f"stages.depth_student.{where}" in str(err.value)


def _registered_student(tmp_path):
    """A depth student with a decoder and learned-looking normalisation, exported and loaded back the way the
    registry serves it (torch.export program + spec)."""
    from llp.learn.export import example_input, export_actor, load_pt2
    from llp.skills.protocol import EvaluateConfig

    spec = {"obs": ["policy/proprio", "policy/command", "depth/depth"], "camera": None}
    env_cfg = EvaluateConfig(env={**SMALL, "depth_camera": {"width": 16, "height": 9}}).env_config(policy_spec=spec)
    from llp.sim.env import ParkourEnv

    env = ParkourEnv(env_cfg, 3, seed=1)
    dims = env.obs_dims()
    actor = _student(dims, spec["obs"], reconstruct="policy/height_scan", num_actions=env.num_actions)
    obs = env.reset()
    actor.update_normalization(actor.observe(obs) + torch.randn(3, actor.obs_dim))
    module, policy_spec = export_actor(actor, dims, robot="lightbot0_like")
    batch = torch.export.Dim("batch")
    program = torch.export.export(module, (torch.from_numpy(example_input(policy_spec)),), dynamic_shapes=({0: batch},))
    buf = io.BytesIO()
    torch.export.save(program, buf)
    return actor, module, load_pt2(buf.getvalue(), policy_spec.to_dict()), policy_spec, env_cfg


def test_the_export_has_no_decoder_and_onnx_and_torchscript_act_as_the_pytorch_policy(tmp_path):
    import onnx

    from llp.learn import deployable as D
    from llp.stages.export import ExportConfig, record

    actor, module, policy, spec, env_cfg = _registered_student(tmp_path)
    assert actor.decoder is not None and not any("decoder" in k for k in module.state_dict())
    frames, dones, actions = record(policy, env_cfg, ExportConfig(record_envs=3, record_steps=60), seed=2)
    dones[20, 1] = True  # and a reset mid-sequence for one env, as a fall would give
    # the deployable module is the trained actor without its decoder: same actions, step by step
    memory = actor.initial_memory(3)
    for t in range(5):
        mean, memory, _ = actor.step(torch.from_numpy(frames[t]), memory)
        assert torch.allclose(mean, torch.from_numpy(actions[t]), atol=1e-5)

    def reference(obs, h):  # the registered torch.export program, the GRU state explicit
        a, h2 = D.PolicyStep(policy.module, spec)(torch.from_numpy(obs), torch.from_numpy(h))
        return a.detach().numpy(), h2.detach().numpy()

    expected = D.replay(reference, spec, frames, dones)
    step = D.PolicyStep(policy.module, spec)
    onnx_path = D.to_onnx(step, tmp_path / "policy.onnx")
    ts_path = D.to_torchscript(step, tmp_path / "policy.pt")
    got_onnx = D.replay(D.onnx_step(D.onnx_session(onnx_path), spec), spec, frames, dones)
    got_ts = D.replay(D.torchscript_step(torch.jit.load(str(ts_path)), spec), spec, frames, dones, batch=1)
    assert np.abs(got_onnx - expected).max() < 1e-4
    assert np.abs(got_ts - expected).max() < 1e-4
    assert np.abs(got_onnx[21:, 1] - got_onnx[21:, 0]).max() > 0  # the reset env went its own way
    # the ONNX graph: explicit GRU state in and out, and no decoder weights in it
    graph = onnx.load(str(onnx_path)).graph
    assert [i.name for i in graph.input] == ["obs", "h_in"] and [o.name for o in graph.output] == ["action", "h_out"]
    stored = sum(int(np.prod(t.dims)) for t in graph.initializer)
    deployed = sum(v.numel() for v in module.state_dict().values())
    decoder = sum(p.numel() for p in actor.decoder.parameters())
    assert stored <= deployed + 64 and stored < deployed + decoder
    timing = D.step_time_ms(D.onnx_step(D.onnx_session(onnx_path), spec), spec, calls=200)
    assert 0 < timing["median_ms"] <= timing["p99_ms"]


def test_the_onnx_file_drives_the_env_in_closed_loop_as_the_registered_student(tmp_path):
    """``OnnxPolicy`` (what `llp evaluate` runs for llp-deployable-policy) builds each frame from the spec's layout
    alone and carries frames and GRU state itself: driving the env, it takes the same actions as the registered
    torch program, step by step, through a reset; a layout that disagrees with the env is refused by name."""
    from llp.learn import deployable as D
    from llp.learn.deployable import load_program
    from llp.sim.env import ParkourEnv

    _, _, policy, spec, env_cfg = _registered_student(tmp_path)
    onnx_path = D.to_onnx(D.PolicyStep(policy.module, spec), tmp_path / "policy.onnx")
    onnx_policy = load_program(onnx_path.read_bytes(), {**spec.to_dict(), "format": "onnx"})
    assert isinstance(onnx_policy, D.OnnxPolicy)
    envs = [ParkourEnv(env_cfg, 3, seed=5) for _ in range(2)]
    obs = [e.reset() for e in envs]
    memory = [p.initial_memory(3) for p in (policy, onnx_policy)]
    worst = 0.0
    with torch.no_grad():
        for t in range(40):
            steps = [p.step(p.observe(o), m) for p, o, m in zip((policy, onnx_policy), obs, memory)]
            worst = max(worst, float((steps[0][0] - steps[1][0]).abs().max()))
            done = torch.zeros(3, dtype=torch.bool)
            done[1] = t == 15  # one env starts afresh mid-way, as after a fall
            results = [e.step(s[0]) for e, s in zip(envs, steps)]
            memory = [s[1].reset(done | r.terminated | r.truncated) for s, r in zip(steps, results)]
            obs = [r.obs for r in results]
    assert worst < 1e-4
    bad = {**spec.to_dict(), "format": "onnx", "obs_layout": [[r, w + 1] for r, w in spec.obs_layout]}
    with pytest.raises(ValueError, match="obs_layout adds up to"):
        D.OnnxPolicy(onnx_path.read_bytes(), bad)
    first = spec.obs_layout[0]
    shifted = [[first[0], first[1] + 1], [spec.obs_layout[1][0], spec.obs_layout[1][1] - 1], *spec.obs_layout[2:]]
    wrong = D.OnnxPolicy(onnx_path.read_bytes(), {**spec.to_dict(), "format": "onnx", "obs_layout": shifted})
    with pytest.raises(ValueError, match=f"{first[0]} is {first[1]} wide, policy.json's obs_layout says"):
        wrong.observe(envs[0].reset())


def test_a_teacher_that_drives_takes_whole_episodes_and_the_student_still_learns_their_labels():
    """DAgger's beta (PPOConfig.teacher_drives): that share of the labelled envs' episodes executes the teacher's
    action, drawn afresh at each reset, so an episode is the teacher's or the student's from start to end; the
    labels (and the student's own actions, for its loss) are recorded either way. A rule with PPO refuses it."""

    class Recorded(CueMemory):  # what the env was asked to execute
        def step(self, actions):
            self.executed.append(actions.clone())
            return super().step(actions)

    def run(share: float):
        torch.manual_seed(0)
        env = Recorded(num_envs=32, horizon=4)
        env.executed = []
        actor = _student(env.obs_dims(), ["policy/cue"])
        collector = RolloutCollector(env, actor, None, 16, teachers=[Teacher(Copier(), torch.arange(32))],
                                     teacher_drives=share)  # fmt: skip
        rollout = collector.collect()
        executed = torch.stack(env.executed)  # [T, N, 1]
        teacher = (executed - rollout.teacher_actions).abs().amax(dim=2) < 1e-6  # [T, N] the teacher's action
        return rollout, teacher

    rollout, teacher = run(0.0)
    assert not teacher.any()  # online DAgger: the student always drives
    rollout, teacher = run(1.0)
    assert teacher.all() and not torch.equal(rollout.actions, rollout.teacher_actions)  # the student's own kept
    rollout, teacher = run(0.5)
    episodes = teacher.reshape(4, 4, 32)  # 16 steps = 4 episodes of 4 steps, every env in step
    assert torch.equal(episodes.all(dim=1), episodes.any(dim=1))  # each episode is wholly one driver's
    share = float(episodes[:, 0].float().mean())
    assert 0.3 < share < 0.7
    with pytest.raises(ConfigError, match="teacher_drives"):
        build(PPOConfig, {"rl_coef": 1.0, "dagger_coef": 1.0, "teacher_drives": 0.5})
