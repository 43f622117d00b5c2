"""How advantages and the policy loss are computed: ``trainer.algorithm``.

The estimators and losses themselves are registered components
(:mod:`agentfly_cli.algorithms.interfaces`); these settings only name them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LossAggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
#: ``loss_agg`` of a policy loss when the user sets none (others: token-mean). GSPO's and SAPO's
#: objectives are means over sequences of per-sequence token means (Zheng et al. 2025, Gao et
#: al. 2025; verl aggregates both so).
DEFAULT_LOSS_AGG = {"gspo": "seq-mean-token-mean", "sapo": "seq-mean-token-mean"}


class CispoSettings(BaseModel):
    """CISPO's bounds on its importance-sampling weight: [1 - clip_low, 1 + clip_high]."""

    model_config = ConfigDict(extra="forbid")

    clip_low: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="The weight is clipped below at 1 - clip_low; 1.0 (a bound of 0) is no "
        "lower bound, as MiniMax-M1 sets it.",
    )
    clip_high: float = Field(
        4.0, ge=0.0, description="The weight is clipped above at 1 + clip_high (ScaleRL: 5)."
    )


class SapoSettings(BaseModel):
    """SAPO's gate temperatures, by the sign of the advantage (Gao et al. 2025: 1.0 and 1.05)."""

    model_config = ConfigDict(extra="forbid")

    tau_pos: float = Field(1.0, gt=0.0, description="Gate temperature where the advantage > 0.")
    tau_neg: float = Field(
        1.05,
        gt=0.0,
        description="Gate temperature where the advantage <= 0 (above tau_pos: the gradient of "
        "negative tokens fades sooner off-policy).",
    )


class ClipCovSettings(BaseModel):
    """Clip-Cov: which tokens lose their gradient (Cui et al. 2025; verl's defaults)."""

    model_config = ConfigDict(extra="forbid")

    ratio: float = Field(
        2e-4,
        gt=0.0,
        le=1.0,
        description="Share of a micro-batch's trained tokens whose gradient is detached (at "
        "least one, where any qualifies).",
    )
    low: float = Field(1.0, description="Only tokens whose covariance is above this qualify.")
    high: float = Field(5.0, description="Only tokens whose covariance is below this qualify.")

    @model_validator(mode="after")
    def _a_band(self) -> ClipCovSettings:
        if self.low >= self.high:
            raise ValueError(f"clip_cov.low ({self.low}) must be below clip_cov.high ({self.high})")
        return self


class KlCovSettings(BaseModel):
    """KL-Cov: which tokens get a KL penalty, and its weight (Cui et al. 2025; verl's defaults)."""

    model_config = ConfigDict(extra="forbid")

    ratio: float = Field(
        2e-4,
        gt=0.0,
        le=1.0,
        description="Share of a micro-batch's trained tokens with the largest covariance that "
        "are penalised (at least one).",
    )
    coef: float = Field(1.0, ge=0.0, description="Weight of their |log-ratio| penalty.")


class AlgorithmSettings(BaseModel):
    """How advantages and the policy loss are computed."""

    model_config = ConfigDict(extra="forbid")

    advantage: str = Field(
        "grpo",
        description="Advantage estimator: grpo, rloo, reinforce_pp, reinforce_pp_baseline, gae, "
        "gigpo (credit per turn), remax, opo, gpg or one a plugin registers.",
    )
    policy_loss: str = Field(
        "ppo",
        description="Policy loss: ppo, gspo, cispo, sapo, clip_cov, kl_cov, gpg or one a plugin "
        "registers.",
    )
    loss_agg: LossAggregation = Field(
        "token-mean",
        description="How per-token losses become one number: token-mean, seq-mean-token-mean "
        "or seq-mean-token-sum-norm (Dr.GRPO). Unset, gspo and sapo use seq-mean-token-mean.",
    )
    norm_adv_by_std: bool = Field(
        True, description="GRPO: divide by the group's std (False is Dr.GRPO)."
    )
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount per trained token.")
    lam: float = Field(1.0, ge=0.0, le=1.0, description="GAE lambda.")
    clip_ratio_low: float = Field(
        0.2, ge=0.0, description="The ratio is clipped below at 1 - clip_ratio_low."
    )
    clip_ratio_high: float = Field(
        0.2, ge=0.0, description="The ratio is clipped above at 1 + clip_ratio_high (DAPO: 0.28)."
    )
    clip_ratio_c: float | None = Field(
        None, description="Dual-clip bound for negative advantages (e.g. 3.0); None is off."
    )
    kl_coef: float = Field(
        0.0, ge=0.0, description="Weight of the KL to the reference model; 0 loads no reference."
    )
    kl_kind: Literal["k1", "k2", "k3"] = Field(
        "k3", description="KL estimator of the KL loss term: k1, k2 or k3 (Schulman)."
    )
    kl_in_reward: bool = Field(
        False,
        description="Subtract kl_coef * k1 from the per-token reward instead of adding a KL loss.",
    )
    entropy_coef: float = Field(0.0, ge=0.0, description="Weight of the entropy bonus.")
    tis_cap: float | None = Field(
        None,
        gt=0.0,
        description="Truncated importance sampling cap on trainer/sampler probability ratios "
        "(e.g. 2.0); None is off (trainer.mode: async with max_staleness > 0: 2.0 unless set).",
    )
    tis_mode: Literal["truncate", "mask"] = Field(
        "truncate",
        description="truncate: weight each token by min(ratio, tis_cap); mask: drop the tokens "
        "whose ratio is above tis_cap or below 1 / tis_cap from the loss, its normalisers and "
        "its entropy and KL terms (verl's token-level rejection).",
    )
    dynamic_sampling: bool = Field(
        False, description="DAPO: drop groups whose rewards are all equal."
    )
    exclude_infra_failures: bool = Field(
        True,
        description="Leave chains that ended for an infrastructure reason (an env that did not "
        "start or died, a backend or gateway failure, a reward that timed out or raised) out "
        "of their group's statistics and out of the loss; counted as infra/failures/<cause>. "
        "false: they train with the reward they got (usually 0).",
    )
    min_group_size: int = Field(
        2,
        ge=1,
        description="A group that exclude_infra_failures left with fewer chains (agent "
        "episodes) than this is dropped (infra/dropped_groups); groups that lost none are kept.",
    )
    value_coef: float = Field(0.5, ge=0.0, description="Weight of the value loss (gae).")
    value_clip: float | None = Field(
        0.2, gt=0.0, description="Clip range of the value update; None is unclipped."
    )
    seq_len_constant: int | None = Field(
        None,
        ge=1,
        description="Dr.GRPO normaliser of seq-mean-token-sum-norm; None: the generation budget.",
    )
    cispo: CispoSettings = Field(
        default_factory=CispoSettings, description="cispo: the bounds of its weight."
    )
    sapo: SapoSettings = Field(
        default_factory=SapoSettings, description="sapo: its gate temperatures."
    )
    clip_cov: ClipCovSettings = Field(
        default_factory=ClipCovSettings, description="clip_cov: which tokens are detached."
    )
    kl_cov: KlCovSettings = Field(
        default_factory=KlCovSettings, description="kl_cov: which tokens are penalised."
    )
    adv_eps: float = Field(1e-6, ge=0.0, description="Added to a std before dividing by it.")
    turn_weight: float = Field(
        1.0,
        ge=0.0,
        description="gigpo: weight of a turn's step-group advantage beside its episode's.",
    )
    turn_gamma: float = Field(
        0.95,
        ge=0.0,
        le=1.0,
        description="gigpo: discount per turn of an episode's score, back from its last turn "
        "(an agent's episode: its turns in all its segments, in time).",
    )
    turn_state: Literal["auto", "observation", "prefix"] = Field(
        "auto",
        description="gigpo: a turn's anchor state. observation: the tokens just before it (the "
        "prompt, or the last tool or env result); prefix: every token before it in its segment "
        "(the exact prompt it answered); auto: prefix for agent (gateway) episodes, "
        "observation for the recipe's turn loop.",
    )
    branch_credit: Literal["episode", "none"] = Field(
        "episode",
        description="An agent episode's branch ends: the last turn of a segment the episode "
        "goes on after (the summary a compaction continues from, a sub-agent's answer). "
        "episode: trained with the episode's advantage like any turn; none: not trained.",
    )

    @model_validator(mode="after")
    def _loss_agg_of_the_policy_loss(self) -> AlgorithmSettings:
        """A policy loss with its own aggregation (gspo) gets it unless loss_agg is set."""
        if "loss_agg" not in self.model_fields_set and self.policy_loss in DEFAULT_LOSS_AGG:
            self.loss_agg = DEFAULT_LOSS_AGG[self.policy_loss]
        return self

    @field_validator("clip_ratio_c")
    @classmethod
    def _dual_clip_above_one(cls, value: float | None) -> float | None:
        if value is not None and value <= 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 (e.g. 3.0), got {value}")
        return value
