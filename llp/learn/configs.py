"""Configuration of the learning rules and networks (plain dataclasses; importing this needs no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from llp.config.schema import check, field

# the activations rsl_rl's MLP knows (rsl_rl.utils.resolve_nn_activation)
ACTIVATIONS = ("elu", "selu", "relu", "crelu", "lrelu", "tanh", "sigmoid", "softplus", "gelu", "swish", "mish")


def _check_net(path: str, hidden_dims: list[int], activation: str, name: str = "hidden_dims") -> None:
    check(len(hidden_dims) > 0, f"{path}.{name}", "needs at least one hidden layer")
    check(all(d >= 1 for d in hidden_dims), f"{path}.{name}", f"layer sizes must be >= 1, got {hidden_dims}")
    check(activation in ACTIVATIONS, f"{path}.activation", f"got {activation!r}, allowed: {', '.join(ACTIVATIONS)}")


@dataclass(kw_only=True)
class ActorConfig:
    """Policy network."""

    obs: list[str] = field(doc="Observation terms as 'group/term' (e.g. 'policy/proprio'), concatenated in order.")
    hidden_dims: list[int] = field(default_factory=lambda: [512, 256, 128], doc="MLP hidden sizes (after the GRU).")
    activation: str = field(default="elu", doc="Activation function.")
    num_frames: int = field(default=1, doc="Frames stacked per step (the paper's teachers: 5).")
    encoder_dims: list[int] = field(default_factory=list, doc="MLP before the GRU; empty = no encoder.")
    gru_hidden: int = field(default=0, doc="GRU hidden size; 0 = feed-forward policy.")
    gru_layers: int = field(default=1, doc="GRU layers.")
    init_std: float = field(default=1.0, doc="Initial action standard deviation.")
    normalize_obs: bool = field(default=True, doc="Running observation normalisation (saved with the policy).")
    reconstruct: str | None = field(default=None, doc="'group/term' the decoder reconstructs from the GRU state.")
    decoder_dims: list[int] = field(default_factory=lambda: [256, 256], doc="Decoder hidden sizes.")

    def validate(self, path: str) -> None:
        check(len(self.obs) > 0, f"{path}.obs", "needs at least one observation term")
        for i, ref in enumerate(self.obs):
            check(ref.count("/") == 1, f"{path}.obs[{i}]", f"expected 'group/term', got {ref!r}")
        _check_net(path, self.hidden_dims, self.activation)
        check(all(d >= 1 for d in self.encoder_dims), f"{path}.encoder_dims", "layer sizes must be >= 1")
        check(self.num_frames >= 1, f"{path}.num_frames", "must be >= 1")
        check(self.gru_hidden >= 0, f"{path}.gru_hidden", "must be >= 0")
        check(self.gru_layers >= 1, f"{path}.gru_layers", "must be >= 1")
        check(self.init_std > 0, f"{path}.init_std", "must be positive")
        check(
            self.reconstruct is None or self.gru_hidden > 0,
            f"{path}.reconstruct",
            "reconstruction decodes the recurrent state: set gru_hidden > 0",
        )


@dataclass(kw_only=True)
class CriticConfig:
    """Value network (asymmetric: reads its own observation terms)."""

    obs: list[str] = field(doc="Observation terms as 'group/term'.")
    hidden_dims: list[int] = field(default_factory=lambda: [512, 256, 128], doc="MLP hidden sizes.")
    activation: str = field(default="elu", doc="Activation function.")
    num_heads: int = field(default=1, doc="Value heads, one per reward group.")
    normalize_obs: bool = field(default=True, doc="Running observation normalisation.")

    def validate(self, path: str) -> None:
        check(len(self.obs) > 0, f"{path}.obs", "needs at least one observation term")
        check(self.num_heads >= 1, f"{path}.num_heads", "must be >= 1")
        _check_net(path, self.hidden_dims, self.activation)


@dataclass(kw_only=True)
class PPOConfig:
    """PPO / DAgger learning rule (per-iteration sizes and coefficients)."""

    num_steps: int = field(default=24, doc="Steps per env per iteration (rollout length).")
    num_epochs: int = field(default=5, doc="Passes over each rollout.")
    num_minibatches: int = field(default=4, doc="Minibatches per pass.")
    clip: float = field(default=0.2, doc="Surrogate and value clipping range.")
    gamma: float = field(default=0.99, doc="Discount.")
    lam: float = field(default=0.95, doc="GAE lambda.")
    value_coef: float = field(default=1.0, doc="Weight of the value loss.")
    entropy_coef: float = field(default=0.005, doc="Weight of the entropy bonus.")
    learning_rate: float = field(default=1e-3, doc="Initial Adam learning rate.")
    schedule: str = field(default="adaptive", doc="'adaptive' (KL-driven) or 'fixed' learning rate.")
    desired_kl: float = field(default=0.01, doc="Target KL for the adaptive schedule.")
    max_grad_norm: float = field(default=1.0, doc="Gradient norm clip.")
    advantage_weights: list[float] = field(
        default_factory=lambda: [1.0], doc="Weight of each reward group's normalised advantage (one per value head)."
    )
    rl_coef: float = field(default=1.0, doc="lambda_RL: weight of the PPO loss (0 = pure DAgger).")
    dagger_coef: float = field(default=0.0, doc="Weight of the DAgger loss (needs teachers).")
    balance_groups: bool = field(default=False, doc="DAgger: weight each expert group equally (see dagger.py).")
    teacher_drives: float = field(
        default=0.0,
        doc="DAgger's beta (Ross et al., 2011): the share of episodes, drawn per labelled env at each reset, in "
        "which the env executes the teacher's action instead of the student's; the student learns from the "
        "labels of every state either way. 0: the student always drives (online DAgger).",
    )
    recon_coef: float = field(default=0.0, doc="Weight of the reconstruction loss (needs a decoder).")
    bptt_length: int | None = field(
        default=None, doc="Truncated BPTT window for recurrent actors (divides num_steps); null = the whole rollout."
    )
    nonfinite_lr_factor: float = field(
        default=0.5,
        doc="An update that leaves a NaN or Inf in a loss or a parameter is undone, and the learning rate is "
        "multiplied by this.",
    )
    max_nonfinite_updates: int = field(
        default=3, doc="That many non-finite updates in a row stop the stage with a clear error."
    )

    def validate(self, path: str) -> None:
        p = f"{path}." if path else ""
        check(0 < self.nonfinite_lr_factor < 1, f"{p}nonfinite_lr_factor", "must be in (0, 1)")
        check(self.max_nonfinite_updates >= 1, f"{p}max_nonfinite_updates", "must be >= 1")
        check(self.num_steps >= 1, f"{p}num_steps", "must be >= 1")
        check(self.num_epochs >= 1, f"{p}num_epochs", "must be >= 1")
        check(self.num_minibatches >= 1, f"{p}num_minibatches", "must be >= 1")
        check(0 < self.gamma <= 1, f"{p}gamma", "must be in (0, 1]")
        check(0 <= self.lam <= 1, f"{p}lam", "must be in [0, 1]")
        check(self.learning_rate > 0, f"{p}learning_rate", "must be positive")
        check(self.clip > 0, f"{p}clip", "must be positive (PPO's clipping range, e.g. 0.2)")
        check(self.desired_kl > 0, f"{p}desired_kl", "must be positive")
        check(self.max_grad_norm > 0, f"{p}max_grad_norm", "must be positive")
        check(self.value_coef >= 0, f"{p}value_coef", "must be >= 0")
        check(self.entropy_coef >= 0, f"{p}entropy_coef", "must be >= 0")
        check(self.recon_coef >= 0, f"{p}recon_coef", "must be >= 0")
        check(self.schedule in ("adaptive", "fixed"), f"{p}schedule", "allowed values: 'adaptive', 'fixed'")
        check(self.rl_coef >= 0 and self.dagger_coef >= 0, f"{p}rl_coef", "coefficients must be >= 0")
        check(self.rl_coef > 0 or self.dagger_coef > 0, f"{p}rl_coef", "rl_coef and dagger_coef cannot both be 0")
        check(0.0 <= self.teacher_drives <= 1.0, f"{p}teacher_drives", "a share of episodes: in [0, 1]")
        check(self.teacher_drives == 0 or (self.rl_coef == 0 and self.dagger_coef > 0), f"{p}teacher_drives",
              "a teacher that drives is a DAgger rule (rl_coef 0, dagger_coef > 0): PPO would learn from actions "
              "its policy did not take")  # fmt: skip
        if self.bptt_length is not None:
            check(
                self.bptt_length >= 1 and self.num_steps % self.bptt_length == 0,
                f"{p}bptt_length",
                f"must divide num_steps ({self.num_steps})",
            )

    @property
    def window(self) -> int:
        return self.bptt_length or self.num_steps


@dataclass(kw_only=True)
class AMPConfig:
    """Adversarial motion prior."""

    hidden_dims: list[int] = field(default_factory=lambda: [256, 128], doc="Discriminator MLP hidden sizes.")
    loss: str = field(default="bce", doc="'bce' (style reward softplus(logit)) or 'lsgan' (least squares).")
    gradient_penalty: float = field(default=10.0, doc="Weight w of the zero-centred gradient penalty.")
    style_coef: float = field(default=1.0, doc="Style reward weight (reward per step = style_coef * dt * style).")
    learning_rate: float = field(default=1e-4, doc="Discriminator Adam learning rate.")
    triggers: list[float] = field(
        default_factory=list, doc="Progress values where the phase changes (strictly increasing); phases = len + 1."
    )
    hand_off: str = field(default="hard", doc="'hard' switch at a trigger or 'smooth' (logistic blend).")
    smooth_width: float = field(default=0.2, doc="Width of the smooth hand-off, in progress units (metres).")
    reward_group: int = field(default=0, doc="Reward group (value head) the style reward is added to.")
    num_minibatches: int = field(default=4, doc="Discriminator minibatches per iteration.")

    def validate(self, path: str) -> None:
        p = f"{path}." if path else ""
        check(self.loss in ("bce", "lsgan"), f"{p}loss", "allowed values: 'bce', 'lsgan'")
        check(self.hand_off in ("hard", "smooth"), f"{p}hand_off", "allowed values: 'hard', 'smooth'")
        check(self.gradient_penalty >= 0, f"{p}gradient_penalty", "must be >= 0")
        check(self.learning_rate > 0, f"{p}learning_rate", "must be positive")
        check(self.num_minibatches >= 1, f"{p}num_minibatches", "must be >= 1")
        check(len(self.hidden_dims) > 0 and all(d >= 1 for d in self.hidden_dims), f"{p}hidden_dims", "sizes >= 1")
        check(self.smooth_width > 0, f"{p}smooth_width", "must be positive")
        for i in range(1, len(self.triggers)):
            check(
                self.triggers[i] > self.triggers[i - 1],
                f"{p}triggers",
                f"trigger positions must be strictly increasing, got {self.triggers}",
            )
