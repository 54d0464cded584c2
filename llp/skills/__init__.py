"""What the stages share: the evaluation protocol, a skill's references, trials and env groups. A stage
imports these, never another stage (tests/test_layers.py)."""
