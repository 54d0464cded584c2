"""The multi-expert merge: env groups on simulator actors, each labelled by its own expert; one student that
reads no group label; the stage's config checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llp.learn.configs import ActorConfig, PPOConfig
from llp.learn.models import Actor

pytestmark = pytest.mark.timeout(600)

STUDENT = ["policy/proprio", "policy/height_scan", "policy/command"]


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    from llp.infra.ray_runtime import init_ray, shutdown_ray

    init_ray(tmp_path_factory.mktemp("ray"), num_cpus=2)
    yield
    shutdown_ray()


class _Labeller(torch.nn.Module):
    """An instrumented expert: a fixed linear map of the proprioception it reads, its own per ``seed``, so a
    label says which expert computed it and from which state."""

    def __init__(self, obs_dim: int, num_actions: int, seed: int):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter(torch.randn(num_actions, obs_dim, generator=gen), requires_grad=False)

    def forward(self, x):
        return x @ self.weight.T


def _expert(seed: int, uri: str):
    import io

    from llp.learn.export import PolicySpec
    from llp.learn.spec import FrozenPolicy

    module = _Labeller(69, 21, seed).eval()
    buffer = io.BytesIO()
    batch = {0: torch.export.Dim("batch")}
    torch.export.save(torch.export.export(module, (torch.zeros(2, 69),), dynamic_shapes=(batch,)), buffer)
    spec = PolicySpec(obs=["policy/proprio"], obs_dim=69, num_frames=1, num_actions=21)
    return module, FrozenPolicy(uri, buffer.getvalue(), spec.to_dict())


def _groups():
    """The merge's two kinds of group, small: terrain courses (every joint driven) and the climb seed's course
    in the terrain env's proprioception, from a standing start."""
    from llp.motion.seeds import seed_reference, seed_spec
    from llp.motion.tracking import TrackingEnvConfig, tracking_task
    from llp.sim.tasks import env_config
    from llp.skills.groups import skill_group_overrides

    terrain = env_config(overrides={"terrain": {"num_levels": 2, "tile_length": 6.0, "tile_width": 6.0}})
    seed = seed_reference(seed_spec("climb_step_25"))
    course = TrackingEnvConfig(task=tracking_task(overrides=skill_group_overrides()), qpos=seed.qpos, fps=seed.fps,
                               obstacle=seed.obstacle, contacts=seed.contacts, reference_id="seed")  # fmt: skip
    return terrain, course


def _spec(envs: int = 4, **overrides):
    from llp.learn.spec import EnvGroup, TeacherSpec, TrainSpec

    terrain, course = _groups()
    walk, walker = _expert(1, "models:/walker/1")
    climb, climber = _expert(2, "models:/climber/1")
    groups = [
        EnvGroup("locomotion", terrain, [TeacherSpec(walker)]),
        EnvGroup("climb_step", course, [TeacherSpec(climber)]),
    ]
    spec = TrainSpec(env=terrain, envs_per_actor=envs, seed=0, actor=ActorConfig(obs=STUDENT, hidden_dims=[16]),
                     critic=None, ppo=PPOConfig(num_steps=4, num_epochs=1, num_minibatches=1, rl_coef=0.0,
                                                dagger_coef=1.0), groups=groups, **overrides)  # fmt: skip
    return spec, {"locomotion": walk, "climb_step": climb}


def test_each_simulator_hosts_one_group_and_every_label_comes_from_that_group_s_expert():
    from llp.actors.simulator import SimulatorWorker
    from llp.learn.learner import build_networks

    spec, experts = _spec()
    seen = {}
    for k in range(4):  # four simulator actors, two groups: 0 and 2 walk, 1 and 3 climb
        mine = spec.for_actor(k, 4)
        name = spec.groups[spec.group_of(k)].name
        assert mine.env is spec.groups[k % 2].env and not mine.groups
        sim = SimulatorWorker(mine, k)
        actor, _ = build_networks(mine, sim.env.obs_dims(), sim.env.num_actions)
        rollout, metrics = sim.collect({"actor": actor.state_dict(), "critic": None})
        proprio = rollout.actor_obs[..., :69]  # the student's first term, the experts' only one
        own = experts[name](proprio)
        other = experts["climb_step" if name == "locomotion" else "locomotion"](proprio)
        torch.testing.assert_close(rollout.teacher_actions, own, atol=1e-5, rtol=1e-5)
        assert float((rollout.teacher_actions - other).abs().mean()) > 0.1  # not the other expert's
        error = (rollout.means - rollout.teacher_actions).pow(2).mean()  # the acting student against its labels
        assert metrics["dagger/label_error"] == pytest.approx(float(error), rel=1e-5)
        seen[name] = type(sim.env.env).__name__  # inside the group label (llp.sim.group_label)
    assert seen == {"locomotion": "ParkourEnv", "climb_step": "TrackingEnv"}


def test_the_student_reads_no_group_label_by_shape_and_by_perturbation():
    """Its input is proprioception, scan and command, as wide in both groups; changing every other term an env
    gives (the tracking reference, the privileged state, the gait clock, ...) changes none of its actions,
    while a change in a term it reads does."""
    from llp.learn.models import Actor
    from llp.motion.tracking_env import TrackingEnv
    from llp.sim.env import ParkourEnv

    terrain, course = _groups()
    envs = {"locomotion": ParkourEnv(terrain, 3, seed=1), "climb_step": TrackingEnv(course, 3, seed=1)}
    dims = {name: env.obs_dims() for name, env in envs.items()}
    widths = {name: [d["policy"][t.split("/")[1]] for t in STUDENT] for name, d in dims.items()}
    assert widths["locomotion"] == widths["climb_step"] == [69, 187, 3]
    torch.manual_seed(0)
    actor = Actor(ActorConfig(obs=STUDENT, num_frames=5, hidden_dims=[32]), dims["locomotion"], 21).eval()
    assert actor.obs_dim == 69 + 187 + 3  # one frame holds nothing else

    @torch.no_grad()
    def act(obs):
        return actor.step(actor.observe(obs), actor.initial_memory(3))[0]

    gen = torch.Generator().manual_seed(3)
    for name, env in envs.items():
        obs = env.reset()
        base = act(obs)
        shaken = {g: {t: (v if f"{g}/{t}" in STUDENT else v + torch.randn(v.shape, generator=gen))
                      for t, v in terms.items()} for g, terms in obs.items()}  # fmt: skip
        shaken["critic"] = {**shaken.get("critic", {}), "group": torch.eye(2)[[0, 1, 0]]}  # a label it never reads
        torch.testing.assert_close(act(shaken), base, atol=0, rtol=0)
        nudged = {g: dict(terms) for g, terms in obs.items()}
        nudged["policy"]["command"] = nudged["policy"]["command"] + 0.5
        assert float((act(nudged) - base).abs().max()) > 0, name


def test_a_pool_of_groups_trains_one_student_and_reports_each_group(ray_local):
    from llp.actors.pool import TrainingPool
    from llp.config.resources import ResourcesConfig

    spec, _ = _spec()
    pool = TrainingPool(ResourcesConfig(sim_actors=2, sim_actor_cpus=0.5), spec)
    try:
        metrics = pool.iteration()
        assert metrics["loss/dagger"] > 0 and pool.num_envs == 8
        assert "group/locomotion/reward_terms/lin_vel_tracking" in metrics
        assert "group/climb_step/reward_terms/anchor_pos" in metrics
        assert "group/locomotion/reward_terms/anchor_pos" not in metrics  # each group its own terms
        assert metrics["group/locomotion/dagger/label_error"] > 0 and metrics["group/climb_step/dagger/label_error"] > 0
    finally:
        pool.close()


@pytest.mark.parametrize(
    "resources, message",
    [
        ({"sim_actors": 1}, "resources.sim_actors is 1, but the stage has 2 env groups"),
        ({"sim_actors": 3}, "not a multiple of the 2 env groups"),
        ({"mode": "colocated"}, "need simulator actors of their own"),
        ({"sim_actors": 2, "learners": 2}, "resources.learners > 1"),
    ],
)
def test_a_pool_refuses_groups_it_cannot_host_before_starting_anything(resources, message):
    from llp.actors.pool import TrainingPool
    from llp.config.resources import ResourcesConfig

    spec, _ = _spec()
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainingPool(ResourcesConfig(**resources), spec)  # raises before any actor exists: Ray is not even up


def test_groups_whose_student_terms_differ_in_width_are_refused_with_the_term(ray_local):
    from dataclasses import replace

    from llp.actors.pool import TrainingPool
    from llp.config.resources import ResourcesConfig

    spec, _ = _spec()
    course = spec.groups[1].env
    narrow = replace(course, task=replace(course.task, height_scan=replace(course.task.height_scan, size=(0.6, 1.0))))
    spec = replace(spec, groups=[spec.groups[0], replace(spec.groups[1], env=narrow)])
    with pytest.raises(ValueError, match="policy/height_scan, 187 wide in env group 'locomotion'"):
        TrainingPool(ResourcesConfig(sim_actors=2, sim_actor_cpus=0.5), spec)


def test_group_names_must_differ_and_groups_name_their_own_teachers():
    from dataclasses import replace

    spec, _ = _spec()
    with pytest.raises(ValueError, match="distinct names"):
        replace(spec, groups=[spec.groups[0], replace(spec.groups[1], name="locomotion")])
    with pytest.raises(ValueError, match="each group names its own teachers"):
        replace(spec, teachers=list(spec.groups[0].teachers))


@pytest.mark.parametrize(
    "override, where, message",
    [
        ({"ppo": {"rl_coef": 1.0}}, "ppo.rl_coef", "DAgger alone"),
        ({"actor": {"obs": [*STUDENT, "policy/gait_clock"]}}, "actor.obs[3]", "what the robot senses in every group"),
        ({"skill_env": {"proprio_layout": "tracking"}}, "skill_env.proprio_layout", "locomotion"),
        ({"skill_env": {"start_posture": "crouch"}}, "skill_env.start_posture", "must be reference or default"),
        ({"skills": {"locomotion": "skill_climb_step"}}, "skills", "terrain group"),
        ({"teacher": "evaluate"}, "teacher", "has no output 'policy'"),
    ],
)
def test_the_merge_config_names_what_is_wrong(override, where, message):
    from llp.config.schema import ConfigError
    from llp.stages.registry import load_pipeline

    sets = [f"stages.merge.{k}={_yaml(v)}" for k, v in _dotted(override).items()]
    with pytest.raises(ConfigError) as err:
        load_pipeline("smoke", sets)
    assert f"stages.merge.{where}" in str(err.value) and message in str(err.value)


def _dotted(tree: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}: one --set per leaf, so the rest of the stage's config stays."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and v and k != "skills":
            out.update(_dotted(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _yaml(value) -> str:
    import json

    return json.dumps(value)


def test_the_unified_student_s_skill_course_covers_every_accepted_height(tmp_path):
    """The skill group tracks every accepted physics-tracked entry of its skill, one lane each, and gives the
    expert's terms (added to the student's) in the terrain env's proprioception."""
    from llp.skills.groups import skill_group_env
    from llp.stages.merge import MergeConfig

    class Ref:
        def __init__(self, qpos, obstacle, contacts, id):
            self.qpos, self.obstacle, self.contacts, self.id, self.fps = qpos, obstacle, contacts, id, 50.0

    from llp.motion.seeds import seed_reference, seed_spec

    seed = seed_reference(seed_spec("climb_step_25"))
    refs = [Ref(seed.qpos, seed.obstacle, seed.contacts, f"r{k}") for k in (1, 2)]
    expert = {"obs": ["policy/proprio", "policy/height_scan", "policy/command", "policy/reference"]}
    env_cfg = skill_group_env(MergeConfig(), refs, expert, "climb_step")
    assert [lane.reference_id for lane in env_cfg.references()] == ["r1", "r2"]
    assert env_cfg.task.observations["policy"] == ["proprio", "height_scan", "command", "reference"]
    assert env_cfg.task.proprio_layout == "locomotion" and env_cfg.task.start_posture == "default"
    assert np.isclose(env_cfg.task.start_window_s, 0.2)


def test_a_critic_may_read_the_group_label_and_the_actor_may_not():
    from dataclasses import replace

    from llp.actors.simulator import SimulatorWorker
    from llp.learn.configs import CriticConfig
    from llp.learn.learner import build_networks

    spec, _ = _spec()
    spec = replace(spec, critic=CriticConfig(obs=["critic/proprio", "group/onehot"], hidden_dims=[8]))
    for k, name in ((0, "locomotion"), (1, "climb_step")):
        sim = SimulatorWorker(spec.for_actor(k, 2), k)
        assert sim.env.obs_dims()["group"] == {"onehot": 2}
        actor, critic = build_networks(spec.for_actor(k, 2), sim.env.obs_dims(), 21)
        rollout, _ = sim.collect({"actor": actor.state_dict(), "critic": critic.state_dict()})
        label = rollout.critic_obs[..., -2:]  # the critic's last term: this group's one-hot at every step
        assert torch.equal(label, torch.eye(2)[k].expand_as(label)), name
    with pytest.raises(ValueError, match="only a critic may know an env's group"):
        replace(spec, actor=ActorConfig(obs=[*STUDENT, "group/onehot"], hidden_dims=[16]))


def test_ppo_covers_only_the_envs_of_the_groups_that_learn_by_rl():
    """Groups that learn from their experts alone (EnvGroup.rl False) add nothing to PPO's surrogate, its KL
    or its advantage statistics: the masked update's surrogate is the update's on those envs alone."""
    import copy

    from llp.config.schema import build
    from llp.learn.configs import CriticConfig
    from llp.learn.models import Critic
    from llp.learn.ppo import PPO
    from llp.learn.rollout import RolloutCollector
    from llp.learn.storage import Rollout
    from tests.toy_envs import PointMass

    env = PointMass(num_envs=6, horizon=20)
    torch.manual_seed(0)
    actor = Actor(build(ActorConfig, {"obs": ["policy/state"], "hidden_dims": [8]}), env.obs_dims(), 2)
    critic = Critic(build(CriticConfig, {"obs": ["critic/state"], "hidden_dims": [8]}), env.obs_dims())
    ro = RolloutCollector(env, actor, critic, 8).collect()
    keep = torch.tensor([True, False, True, True, False, False])
    part = Rollout(**{k: (v[keep] if k == "last_values" else v[:, keep]) if torch.is_tensor(v) else v
                      for k, v in ro.__dict__.items()})  # fmt: skip
    with torch.no_grad():  # the policy moved since it collected: ratios away from 1, a KL above 0
        for p in actor.parameters():
            p.add_(0.3 * torch.randn_like(p))
    cfg = PPOConfig(num_steps=8, num_epochs=1, num_minibatches=1, learning_rate=0.0)

    def update(rollout, mask=None):  # each on its own copy: an update also moves the input normalisers
        return PPO(copy.deepcopy(actor), copy.deepcopy(critic), cfg, rl_envs=mask).update(rollout)

    masked, alone, everything = update(ro, keep), update(part), update(ro)
    assert masked["loss/kl"] > 1e-4
    for key in ("loss/surrogate", "loss/kl", "loss/ratio_deviation"):
        assert masked[key] == pytest.approx(alone[key], rel=1e-5), key
        assert everything[key] != pytest.approx(masked[key], rel=1e-3), key
    spec, _ = _spec()
    with pytest.raises(ValueError, match="no env group learns by RL"):
        from dataclasses import replace

        replace(spec, ppo=PPOConfig(num_steps=4, rl_coef=1.0, dagger_coef=1.0),
                groups=[replace(g, rl=False) for g in spec.groups])  # fmt: skip
    both = replace(spec, ppo=PPOConfig(num_steps=4, rl_coef=1.0, dagger_coef=1.0),
                   groups=[spec.groups[0], replace(spec.groups[1], rl=False)])  # fmt: skip
    assert both.rl_envs(2, 4).tolist() == [True, True, False, False, True, True, False, False]


def test_rollouts_of_groups_with_and_without_labels_or_amp_features_join_with_zeros_for_the_missing():
    from llp.learn.storage import Rollout

    def part(n, labelled, amp):
        T, A, F = 3, 2, 4
        z = torch.zeros
        return Rollout(actor_obs=z(T, n, 5), critic_obs=z(T, n, 5), actions=z(T, n, A), log_probs=z(T, n),
                       means=z(T, n, A), stds=torch.ones(T, n, A), values=z(T, n, 1), rewards=z(T, n, 1),
                       terminated=z(T, n, dtype=torch.bool), truncated=z(T, n, dtype=torch.bool),
                       final_values=z(T, n, 1), last_values=z(n, 1),
                       teacher_actions=torch.ones(T, n, A) if labelled else None,
                       labelled=torch.ones(n, dtype=torch.bool) if labelled else None,
                       amp_obs=torch.ones(T, n, F) if amp else None, amp_phase=torch.ones(T, n) if amp else None,
                       extras={"amp_next": torch.ones(T, n, F)} if amp else {})  # fmt: skip

    joined = Rollout.concat_envs([part(2, True, False), part(3, False, True)])
    assert joined.labelled.tolist() == [True, True, False, False, False]
    assert joined.teacher_actions[:, :2].eq(1).all() and joined.teacher_actions[:, 2:].eq(0).all()
    assert joined.amp_obs.shape == (3, 5, 4) and joined.amp_obs[:, :2].eq(0).all() and joined.amp_obs[:, 2:].eq(1).all()
    assert joined.extras["amp_next"].shape == (3, 5, 4) and joined.amp_phase[:, :2].eq(0).all()


def test_an_amp_prior_on_one_group_rewards_and_judges_that_group_s_envs_only():
    from llp.learn.amp import AMP
    from llp.learn.configs import AMPConfig
    from llp.learn.storage import Rollout

    T, N, F = 4, 6, 3
    gen = torch.Generator().manual_seed(0)
    covered = torch.tensor([False, False, True, True, True, False])
    refs = [torch.randn(64, 2 * F, generator=gen) for _ in range(2)]
    amp = AMP(AMPConfig(hidden_dims=[8], triggers=[0.0]), F, refs, dt=0.02, envs=covered)
    z = torch.zeros
    ro = Rollout(actor_obs=z(T, N, 1), critic_obs=z(T, N, 1), actions=z(T, N, 1), log_probs=z(T, N), means=z(T, N, 1),
                 stds=torch.ones(T, N, 1), values=z(T, N, 1), rewards=z(T, N, 1),
                 terminated=z(T, N, dtype=torch.bool), truncated=z(T, N, dtype=torch.bool), final_values=z(T, N, 1),
                 last_values=z(N, 1), amp_obs=torch.randn(T, N, F, generator=gen),
                 amp_phase=torch.linspace(-1, 1, T)[:, None].expand(T, N).contiguous(),
                 extras={"amp_next": torch.randn(T, N, F, generator=gen)})  # fmt: skip
    extra = amp.extra_rewards(ro, 1)[..., 0]
    assert extra[:, ~covered].abs().max() == 0 and extra[:, covered].abs().min() > 0
    seen = [int(d.normalizer.count) for d in amp.discriminators]
    amp.update(ro)
    added = sum(int(d.normalizer.count) - s for d, s in zip(amp.discriminators, seen))
    assert added == T * int(covered.sum())  # the policy's samples: the covered envs' transitions alone


def test_a_pool_trains_expert_groups_by_dagger_beside_an_rl_group_with_an_amp_prior(ray_local):
    """The transition stage's layout, small: a walking group labelled by its expert (no PPO there) beside a
    course group with no expert, learning by PPO with an AMP prior; the critic reads the group's one-hot."""
    from dataclasses import replace

    from llp.actors.pool import TrainingPool
    from llp.config.resources import ResourcesConfig
    from llp.learn.configs import AMPConfig, CriticConfig
    from llp.learn.spec import AMPSpec, EnvGroup, TeacherSpec
    from llp.sim.tasks import env_config

    spec, _ = _spec()
    small = {"terrain": {"num_levels": 2, "tile_length": 6.0, "tile_width": 6.0}}
    obs = {"policy": ["proprio", "command", "height_scan"], "critic": ["proprio"], "amp": ["amp_features", "progress"]}
    course = env_config(overrides={**small, "observations": obs})
    _, walker = _expert(1, "models:/walker/1")
    width = 10 + 2 * 21
    gen = torch.Generator().manual_seed(3)
    prior = AMPSpec(AMPConfig(hidden_dims=[16], triggers=[0.0]), [torch.randn(64, 2 * width, generator=gen)] * 2)
    groups = [
        EnvGroup("walk", spec.groups[0].env, [TeacherSpec(walker)], rl=False),
        EnvGroup("course", course, rl=True, amp=True),
    ]
    spec = replace(spec, groups=groups, amp=prior, critic=CriticConfig(obs=["critic/proprio", "group/onehot"],
                   hidden_dims=[8]), ppo=PPOConfig(num_steps=4, num_epochs=1, num_minibatches=1, rl_coef=1.0,
                                                   dagger_coef=1.0))  # fmt: skip
    pool = TrainingPool(ResourcesConfig(sim_actors=2, sim_actor_cpus=0.5), spec)
    try:
        metrics = pool.iteration()
    finally:
        pool.close()
    assert metrics["loss/dagger"] > 0 and "loss/surrogate" in metrics and metrics["amp/advantage_change"] > 0
    assert "group/walk/dagger/label_error" in metrics and "group/course/dagger/label_error" not in metrics
    with pytest.raises(ValueError, match="needs a group that learns by RL"):
        replace(spec, groups=[groups[0], replace(groups[1], rl=False)])
    with pytest.raises(ValueError, match="an AMP prior needs an env group it covers"):
        replace(spec, groups=[groups[0], replace(groups[1], amp=False)])


@pytest.mark.parametrize(
    "actors, groups, expected",
    [(2, 2, (2, 0.9)), (2, 3, (3, 0.6)), (4, 3, (3, 1.2)), (7, 3, (6, 1.05)), (6, 3, (6, 0.9))],
)
def test_groups_share_the_simulator_cpus_one_or_more_actors_each(actors, groups, expected):
    from llp.config.resources import ResourcesConfig

    layout = ResourcesConfig(sim_actors=actors, sim_actor_cpus=0.9, sim_resources={"cpu_sim_node": 1}).for_groups(
        groups
    )
    assert (layout.sim_actors, layout.sim_actor_cpus) == expected
    assert layout.sim_actors * layout.sim_actor_cpus == pytest.approx(actors * 0.9)
    # the custom resources that place them shrink alike: a cluster sized for the profile's actors still fits them
    assert layout.sim_actors * layout.sim_resources["cpu_sim_node"] == pytest.approx(actors, abs=1e-3)


def test_a_registered_policy_s_program_gives_an_actor_its_network_and_normaliser():
    """The transition stage starts from the merged student's registered program: a fresh actor loaded from
    the program's weights acts as the original does (only its action noise is its own)."""
    import io

    from llp.learn.export import example_input, export_actor

    dims = {"policy": {"proprio": 6, "height_scan": 5, "command": 3}}
    torch.manual_seed(0)
    original = Actor(ActorConfig(obs=STUDENT, num_frames=2, hidden_dims=[8]), dims, 4)
    original.normalizer.update(torch.randn(50, 14) * 3 + 1)  # a normaliser that has seen data
    module, spec = export_actor(original.eval(), dims)
    buffer = io.BytesIO()
    x = torch.from_numpy(example_input(spec))
    torch.export.save(torch.export.export(module, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},)), buffer)
    torch.manual_seed(1)
    fresh = Actor(ActorConfig(obs=STUDENT, num_frames=2, hidden_dims=[8], init_std=0.3), dims, 4).eval()
    weights = torch.export.load(io.BytesIO(buffer.getvalue())).state_dict
    missing, unexpected = fresh.load_state_dict(weights, strict=False)
    assert weights["normalizer.norm.count"] == 50
    assert missing == ["distribution.std_param"] and not unexpected
    frames = torch.randn(3, 2, 14)
    torch.testing.assert_close(fresh.flat(frames), original.flat(frames))
    # the transition stage checks the fit before anything expensive, and names the mismatch
    from llp.learn.spec import FrozenPolicy
    from llp.stages.transition import TransitionConfig, _student_weights

    student = FrozenPolicy("models:/student/1", buffer.getvalue(), {**spec.to_dict(), "obs_layout": spec.obs_layout})
    fits = TransitionConfig(actor=ActorConfig(obs=STUDENT, num_frames=2, hidden_dims=[8]))
    assert set(_student_weights(fits, student)) == set(weights)
    with pytest.raises(ValueError, match=r"layers \[\(8, 28\), \(4, 8\)\]\) does not fit actor.hidden_dims \[16\]"):
        _student_weights(TransitionConfig(actor=ActorConfig(obs=STUDENT, num_frames=2, hidden_dims=[16])), student)


def test_course_trials_judge_the_course_the_policy_trained_on():
    """The transition stage's course evaluations keep the course's tiles, commands and randomization, and start
    every trial from the evaluation's own range instead of the start curriculum."""
    from llp.sim.tasks import env_config
    from llp.stages.transition import TransitionConfig, course_trials_env

    default = TransitionConfig().course_env
    env = course_trials_env(default, (1.95, 2.15))
    assert env == {"terrain": default["terrain"], "randomization": {"goal_starts": [[1.95, 2.15]]}}
    trained = {**default, "commands": {"goal_speed": [0.2, 0.3]},
               "randomization": {**default["randomization"], "motor_strength": None, "spawn_jitter": 0.0}}  # fmt: skip
    cfg = env_config("locomotion", overrides=course_trials_env(trained, (0.0, 0.0)))
    assert cfg.commands.goal_speed == (0.2, 0.3)
    assert cfg.randomization.motor_strength is None and cfg.randomization.spawn_jitter == 0.0
    assert cfg.randomization.goal_start_curriculum is False
    assert [list(r) for r in cfg.randomization.goal_starts] == [[0.0, 0.0]]
    assert default["randomization"]["goal_start_curriculum"] is True  # the stage's config is left as it was


def test_the_skill_groups_train_under_the_course_conditions_and_the_course_starts_at_the_skill_start():
    """The skill's phase B and the merge's and transition's skill groups draw the transition course's friction and
    its sideways spawn (goal tiles: half the spawn jitter to each side), the conditions the skill meets on the course;
    the course's start curriculum begins where the skill's motion starts, 0.45 m before the box."""
    from llp.config.pipeline import load_pipeline
    from llp.sim.tasks import env_config
    from llp.stages.merge import MergeConfig
    from llp.stages.registry import stage_config
    from llp.stages.skill_expert import SkillExpertConfig
    from llp.stages.transition import TransitionConfig

    local = load_pipeline("local")  # what `make run` trains, and the stages' own defaults
    configs = [stage_config(local, s) for s in ("skill_climb_step", "merge", "transition")]
    for skill, merge, transition in (configs, (SkillExpertConfig(), MergeConfig(), TransitionConfig())):
        course = env_config("locomotion", overrides=transition.course_env)
        for env in (skill.generalization.env, merge.skill_env, transition.skill_env):
            assert tuple(env["friction"]) == tuple(course.randomization.friction) == (0.5, 1.25)
            assert env["lateral_m"] == course.randomization.spawn_jitter / 2 == 0.15
        lo, hi = course.randomization.goal_starts[0]
        box = course.terrain.approach_length
        assert box - hi <= 0.45 <= box - lo and hi - lo <= 0.05
        assert course.randomization.goal_starts[-1] == (0.0, 0.0)  # last, the whole approach from the spawn


def test_every_climb_group_of_make_run_starts_half_its_episodes_walking_in_over_the_same_band():
    """`make run`'s skill phase B and its merge's and transition's climb groups walk in alike: half the episodes
    mid-stride, 0-0.35 m behind the skill's start, heights not held to the clock, in the teacher's recorded gait
    (a teacher stage each); so the students learn the arrival their expert learned."""
    from llp.config.pipeline import load_pipeline
    from llp.stages.registry import STAGES, stage_config

    local = load_pipeline("local")
    skill, merge, transition = (stage_config(local, s) for s in ("skill_climb_step", "merge", "transition"))
    for env in (skill.generalization.env, merge.skill_env, transition.skill_env):
        assert (env["walking_starts"], env["walking_lead_in_m"]) == (0.5, 0.35)
        assert env["terminations"]["walking_unheld_z"] == 1.0
    assert skill.teacher == merge.teacher == transition.teacher == "locomotion_teacher"
    assert STAGES["skill_expert"].inputs(skill)["teacher"] == "locomotion_teacher.policy"
