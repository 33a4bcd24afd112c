"""SimulationConfig: one serving configuration, validated at construction, never mutated."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specgauge.simulator.acceptance import AcceptanceModel, IIDAcceptance
from specgauge.simulator.drafts import DEFAULT_ACCEPTANCE, KINDS, draft_kind
from specgauge.simulator.trees import rank_rates, tree_depth
from specgauge.errors import ConfigError
from specgauge.simulator.policies import POLICY_FORMS, Policy, parse_policy
from specgauge.simulator.profiles import known_gpus, known_models
from specgauge.simulator.workload import ARRIVALS, LENGTH_DISTRIBUTIONS, read_trace

#: the slowest request rate simulated: arrival times stay small enough that float64 seconds
#: still resolve microsecond step times (1e-158 req/s made every step vanish: TPOT 0)
MIN_QPS = 1e-6
MAX_PLAUSIBLE_GAMMA = 16          # vLLM and SGLang deployments draft 1 to ~10 tokens per round
MAX_PLAUSIBLE_PREFILL_CHUNKS = 64  # a prompt prefilled over more iterations than this is a misconfiguration


def _positive_int(name: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _positive_float(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")


def _alpha(text: str) -> AcceptanceModel:
    """``--alpha 0.8`` is the i.i.d. acceptance model with that rate; ``--alpha trace.jsonl[:eagle]`` replays
    measured per-request acceptance (``specgauge.simulator.replay``)."""
    if ".jsonl" in text.lower():
        from specgauge.simulator.replay import ReplayAcceptance

        path, _, method = text.partition(".jsonl")
        return ReplayAcceptance.from_jsonl(path + ".jsonl", method.lstrip(":") or "eagle")
    return IIDAcceptance(float(text))


def option(default, help: str, **cli) -> object:  # noqa: A002 - the metadata key argparse uses
    """A configuration field that is also a command-line option of ``simulate`` and ``plan``.

    ``help`` is the option's help text (units in it); ``cli`` may set ``flag`` (default
    ``--field-name``), ``parse`` (text -> value; default from the field's type), ``names``
    (a function listing the valid names, shown in the help) or ``sweep=False`` (one value
    even in ``plan``).
    """
    return field(default=default, metadata={"help": help, **cli})


@dataclass(frozen=True)
class SimulationConfig:
    """Everything one simulated run depends on; ``seed`` is the only source of randomness.

    A field with ``metadata["help"]`` (made with ``option``) is a command-line option of
    ``specgauge simulate`` and ``specgauge plan``, generated from this class: add a field
    here, with its help, and both commands take it.
    """

    gpu: str = option("h200", "GPU profile", names=known_gpus)
    target: str = option("qwen3-32b", "target model profile", names=known_models)
    draft: str | None = option("qwen3-0.6b", "draft: a model profile (a separate LM), eagle (an EAGLE-3 head: vLLM's "
                               "speculative_config \"method\": \"eagle3\" or \"eagle\", SGLang's EAGLE3), mtp, "
                               "ngram (prompt lookup), or 'none'", names=lambda: [*KINDS[1:], *known_models()])
    tp: int = option(1, "tensor-parallel degree (GPUs per replica); must divide the models' attention and KV heads")
    dp: int = option(1, "data-parallel attention ranks of a MoE target (SGLang --enable-dp-attention --dp-size, vLLM "
                        "--data-parallel-size): each rank runs attention, its KV and the dense layers on its own "
                        "requests at --tp; the MoE layers span all tp x dp GPUs; --batch-size counts every rank's requests")
    ep: int = option(1, "expert-parallel degree of a MoE target (vLLM --enable-expert-parallel, SGLang --ep-size): the "
                        "routed experts split over this many of the tp x dp GPUs, tokens sent to them and back "
                        "all-to-all; 1: every expert split by tensor parallelism; must divide tp x dp and the experts")
    gamma: int = option(5, "drafted tokens per round (0 = no speculation; the maximum for adaptive policies)")
    acceptance: AcceptanceModel | None = option(
        None, "i.i.d. per-token acceptance rate α in [0, 1], or TRACE.jsonl[:eagle|ngram] to replay measured "
        "per-request acceptance; none: the draft kind's default (model 0.8, eagle 0.75, mtp 0.8, ngram 0.7: "
        "placeholders to calibrate)", flag="--alpha", parse=_alpha)
    draft_cost_ratio: float | None = option(None, "fixed draft/target step-time ratio c instead of the draft's own cost")
    draft_tp: int | None = option(None, "tensor-parallel degree of the draft (default: the target's; vLLM's "
                                        "draft_tensor_parallel_size); an eagle or mtp head takes 1 or the target's")
    draft_kv_budget: int | None = option(None, "cached tokens a draft model reads per sequence (a StreamingLLM-style "
                                               "sparse-KV draft, as MagicDec's; the target as its own draft then "
                                               "shares its weights); default: all")
    empty_proposals: float | None = option(None, "probability in [0, 1) that a proposal is empty (default: 0.5 for "
                                                 "ngram, 0 otherwise)")
    tree: str | None = option(None, "a tree draft instead of a chain: topk:KxD (K children a node, D levels) or "
                                    "EAGLE's choice lists, choices:0;1;0-0;0-1; γ > 0 becomes the tree's depth")
    tree_acceptance: str | None = option(None, "a tree's per-sibling-rank acceptance r0|r1|... (P(the r-th sibling "
                                               "is the one accepted)); default α·(1−α)^r from the chain's α")
    batch_size: int = option(64, "batch cap (concurrently running requests)")
    spec_batch_size: int | None = option(None, "batch cap of the speculative run alone, when the engine lowers it "
                                               "for speculation (SGLang resets --max-running-requests to 48 when "
                                               "speculating unless it is set); default: --batch-size")
    qps: float | None = option(None, "request rate (requests/s); 'none' keeps the batch full (saturated)")
    requests: int = option(1000, "number of requests (with --arrival trace: at most this many of the trace's)")
    prompt_len: int = option(512, "prompt length in tokens (mean for non-fixed distributions)")
    output_len: int = option(256, "output length in tokens (mean for non-fixed distributions)")
    length_dist: str = option("fixed", "length distribution: " + " | ".join(LENGTH_DISTRIBUTIONS))
    policy: str = option("fixed", f"speculation policy: {POLICY_FORMS}")
    arrival: str = option("poisson", "arrival process: " + " | ".join(ARRIVALS) + " (with --qps; saturated without: "
                          "every request waiting at time 0, lock-step waves with fixed lengths); closed: a closed loop "
                          "at the batch cap in its steady state, prefills interleaved (vllm bench serve "
                          "--max-concurrency as calibrate reads it), without --qps")
    arrival_cv: float = option(1.0, "coefficient of variation of the gamma arrival process's gaps")
    trace: str | None = option(None, "CSV of arrivals (arrival_s[, prompt_len, output_len]); needs --arrival trace")
    seed: int = option(0, "root seed of every random stream (same seed, same CSV)")
    profiles: str | None = option(None, "TOML/JSON files (comma-separated, merged in order; a table naming a known "
                                        "GPU or model changes only the fields it gives) with [gpus.NAME], "
                                        "[models.NAME] and [steps.NAME] tables, e.g. a `specgauge calibrate` output",
                                  flag="--profiles", sweep=False)
    max_batched_tokens: int = option(8192, "token budget per engine iteration (tokens; chunked prefill)")
    block_size: int = option(16, "KV-cache block size (tokens)")
    gpu_memory_utilization: float = option(0.9, "fraction of GPU memory the engine may use, in (0, 1]")
    parsed_policy: Policy = field(init=False, repr=False, compare=False)  # ``policy``, parsed once

    def __post_init__(self) -> None:
        _positive_int("tp", self.tp)
        _positive_int("dp", self.dp)
        _positive_int("ep", self.ep)
        if (self.tp * self.dp) % self.ep:
            raise ConfigError(f"--ep {self.ep} must divide the {self.tp * self.dp} GPUs of tp {self.tp} x dp {self.dp}")
        _positive_int("gamma", self.gamma, minimum=0)
        _positive_int("batch_size", self.batch_size)
        _positive_int("requests", self.requests)
        _positive_int("prompt_len", self.prompt_len)
        _positive_int("output_len", self.output_len)
        _positive_int("max_batched_tokens", self.max_batched_tokens)
        _positive_int("block_size", self.block_size)
        _positive_int("seed", self.seed, minimum=0)
        if self.draft_tp is not None:
            _positive_int("draft_tp", self.draft_tp)
        if self.draft_kv_budget is not None:
            _positive_int("draft_kv_budget", self.draft_kv_budget)
        if self.spec_batch_size is not None:
            _positive_int("spec_batch_size", self.spec_batch_size)
        if self.empty_proposals is not None and not (
                isinstance(self.empty_proposals, (int, float)) and 0 <= self.empty_proposals < 1):
            raise ConfigError(f"empty_proposals must be in [0, 1), got {self.empty_proposals!r}")
        if self.qps is not None:
            _positive_float("qps", self.qps)
            if self.qps < MIN_QPS:
                raise ConfigError(f"qps must be >= {MIN_QPS:g} requests/s (one request in {1 / MIN_QPS / 86400:.0f} "
                                  f"days; slower, float64 seconds lose the step times), got {self.qps!r}")
        _positive_float("arrival_cv", self.arrival_cv)
        if self.draft_cost_ratio is not None and not (
                isinstance(self.draft_cost_ratio, (int, float)) and math.isfinite(self.draft_cost_ratio) and self.draft_cost_ratio >= 0):
            raise ConfigError(f"draft_cost_ratio must be a finite number >= 0, got {self.draft_cost_ratio!r}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}")
        if isinstance(self.draft, str) and self.draft.lower() in ("", "none"):
            object.__setattr__(self, "draft", None)
        if self.acceptance is None:
            object.__setattr__(self, "acceptance", DEFAULT_ACCEPTANCE[draft_kind(self.draft) or "model"])
        if not isinstance(self.acceptance, AcceptanceModel):
            raise ConfigError(f"acceptance must be an acceptance model (IIDAcceptance, ...), got {self.acceptance!r}")
        if self.arrival not in ARRIVALS:
            raise ConfigError(f"unknown arrival process {self.arrival!r}; valid: {', '.join(ARRIVALS)}")
        if self.length_dist not in LENGTH_DISTRIBUTIONS:
            raise ConfigError(f"unknown length distribution {self.length_dist!r}; valid: {', '.join(LENGTH_DISTRIBUTIONS)}")
        if self.arrival == "closed" and self.qps is not None:
            raise ConfigError(f"--arrival closed is a closed loop at the batch cap (no request rate); drop --qps "
                              f"{self.qps:g} or use --arrival poisson")
        if self.arrival == "closed" and self.requests < 2:
            raise ConfigError(f"--arrival closed reads its rates between the first and last of the measured "
                              f"requests' completions: give --requests 2 or more, got {self.requests}")
        if self.arrival == "trace" and self.trace is None:
            raise ConfigError("--arrival trace needs a workload trace file (--trace PATH)")
        if self.trace is not None and self.arrival != "trace":
            raise ConfigError(f"--trace {self.trace} is only read with --arrival trace (arrival here is {self.arrival!r}); "
                              "add --arrival trace or drop --trace")
        if self.arrival == "trace":
            read_trace(self.trace)  # refuse a missing or invalid trace now, before any simulation
        if self.tree is not None and str(self.tree).lower() in ("", "none", "chain"):
            object.__setattr__(self, "tree", None)
        if self.tree is not None:
            if self.gamma > 0:
                object.__setattr__(self, "gamma", tree_depth(self.tree))
            if self.policy not in ("fixed", "none"):
                raise ConfigError(f"a tree draft runs with policy fixed, not {self.policy!r}")
            rank_rates(self.tree_acceptance)
        object.__setattr__(self, "parsed_policy", parse_policy(self.policy, self.gamma))  # refuses a bad one now

    def implausible(self) -> list[str]:
        """Warnings, in words, for valid values that no real deployment would use."""
        out = []
        gamma = self.parsed_policy.max_gamma
        if gamma > MAX_PLAUSIBLE_GAMMA:
            out.append(f"--gamma {gamma} is implausible: engines draft 1 to {MAX_PLAUSIBLE_GAMMA} tokens per round, and "
                       f"a run of {gamma} drafts is almost never accepted in full")
        verify = self.batch_size * (gamma + 1)
        if self.max_batched_tokens < verify:
            out.append(f"--max-batched-tokens {self.max_batched_tokens} is below one full verification pass "
                       f"(batch {self.batch_size} x (γ+1) = {verify} tokens); engines need at least that")
        iterations = -(-self.prompt_len // self.max_batched_tokens)
        if iterations > MAX_PLAUSIBLE_PREFILL_CHUNKS:
            out.append(f"--max-batched-tokens {self.max_batched_tokens} splits each {self.prompt_len}-token prompt "
                       f"into {iterations} prefill chunks; engines use budgets of thousands of tokens")
        return out

    @property
    def speculative(self) -> bool:
        return self.parsed_policy.max_gamma > 0

    def columns(self) -> dict[str, object]:
        """The configuration's own CSV columns: flat, stable names, same order every time."""
        return {
            "gpu": self.gpu,
            "target": self.target,
            "draft": self.draft if self.draft is not None else "none",
            "tp": self.tp,
            "dp": self.dp,
            "ep": self.ep,
            "gamma": self.gamma,
            "policy": self.policy,
            "acceptance": self.acceptance.label(),
            "alpha": self.acceptance.mean_alpha,
            "draft_kind": draft_kind(self.draft) or "none",
            "tree": self.tree if self.tree is not None else "none",
            "tree_acceptance": self.tree_acceptance,
            "draft_tp": self.draft_tp,
            "draft_kv_budget": self.draft_kv_budget,
            "empty_proposals": self.empty_proposals,
            "draft_cost_ratio": self.draft_cost_ratio,
            "batch_size": self.batch_size,
            "spec_batch_size": self.spec_batch_size,
            "qps": self.qps,
            "arrival": "saturated" if self.qps is None and self.arrival not in ("trace", "closed") else self.arrival,
            "arrival_cv": self.arrival_cv,
            "requests": self.requests,
            "prompt_len": self.prompt_len,
            "output_len": self.output_len,
            "length_dist": self.length_dist,
            "max_batched_tokens": self.max_batched_tokens,
            "block_size": self.block_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "seed": self.seed,
        }
