"""Build hook for the one C extension (height-grid ray casting); everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("llp.sim._raycast", ["llp/sim/_raycast.c"], extra_compile_args=["-O3"])])
