"""An env in a child process (``llp.sim.remote_env``): the same rollout as in-process, clear errors, no orphans."""

import os
import signal
import sys

import numpy as np
import pytest
import torch

from llp.sim.env import ParkourEnv
from llp.sim.remote_env import EnvServerError, RemoteVecEnv
from llp.sim.tasks import env_config


def _flat(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _flat(v, f"{prefix}/{k}")
    else:
        yield prefix, tree


def _assert_same(a, b, where):
    fa, fb = dict(_flat(a)), dict(_flat(b))
    assert fa.keys() == fb.keys(), where
    for key, va in fa.items():
        vb = fb[key]
        assert type(va) is type(vb), f"{where}{key}: {type(va).__name__} vs {type(vb).__name__}"
        if isinstance(va, torch.Tensor):
            torch.testing.assert_close(va, vb, rtol=0, atol=0, equal_nan=True, msg=f"{where}{key}")
        elif isinstance(va, np.ndarray):
            assert np.array_equal(va, vb, equal_nan=va.dtype.kind == "f"), f"{where}{key}"
        else:
            assert va == vb, f"{where}{key}"


def test_a_remote_env_steps_exactly_as_the_same_env_in_process():
    cfg = env_config()  # randomisation and the curriculum on: the child must draw the same numbers
    local = ParkourEnv(cfg, 4, seed=3)
    remote = RemoteVecEnv("llp.sim.env:ParkourEnv", {"cfg": cfg, "num_envs": 4, "seed": 3})
    try:
        assert (remote.num_envs, remote.num_actions, remote.reward_names) == (4, local.num_actions, local.reward_names)
        assert remote.obs_dims() == local.obs_dims()
        _assert_same(remote.reset(), local.reset(), "reset")
        gen = torch.Generator().manual_seed(0)
        ended = 0
        for t in range(80):
            actions = torch.randn(4, local.num_actions, generator=gen)
            r, lo = remote.step(actions), local.step(actions)
            for field in ("obs", "reward", "terminated", "truncated", "final_obs", "info"):
                _assert_same(getattr(r, field), getattr(lo, field), f"step {t} {field}")
            ended += int((lo.terminated | lo.truncated).sum())
        assert ended > 0  # the comparison covered resets of single envs
        _assert_same(remote.course_state(), local.course_state(), "course_state")
    finally:
        remote.close()
    assert remote.proc.returncode == 0


def test_a_bad_factory_is_named_and_leaves_no_process_behind():
    with pytest.raises(EnvServerError, match="no_such_module"):
        RemoteVecEnv("llp.sim.no_such_module:Env")
    with pytest.raises(FileNotFoundError, match="simulator python"):
        RemoteVecEnv("llp.sim.env:ParkourEnv", python="/nonexistent/python3.12")


def test_a_simulator_that_prints_does_not_break_the_pipe_and_its_errors_come_back():
    remote = RemoteVecEnv("tests.toy_envs:ChattyEnv", {"num_envs": 3})
    try:
        assert remote.num_envs == 3
        out = remote.step(torch.ones(3, 2))
        assert torch.equal(out.reward, torch.full((3,), 2.0))
        with pytest.raises(EnvServerError, match="ValueError: actions must be"):
            remote.step(torch.ones(2, 2))
        assert remote.step(torch.zeros(3, 2)).reward.sum() == 0  # still serving after the error
    finally:
        remote.close()


def test_a_dead_child_is_reported_on_the_next_call():
    remote = RemoteVecEnv("tests.toy_envs:ChattyEnv", {"num_envs": 2})
    os.kill(remote.proc.pid, signal.SIGKILL)
    remote.proc.wait()
    with pytest.raises(EnvServerError, match="exited with code -9"):
        remote.step(torch.zeros(2, 2))
    remote.close()
    assert sys.executable == remote.python
