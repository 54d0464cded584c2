"""The Isaac Lab 3 (Newton physics) side of the ``isaaclab`` backend. These modules run only in the Isaac Lab
environment (Python 3.12, ``make isaaclab``); the platform reaches them through ``llp.sim.remote_env``."""
