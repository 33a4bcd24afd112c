"""Adapters over vLLM's real v1 ``RejectionSampler`` (tested with vLLM 0.33.0).

The decoder contract hands over probabilities; vLLM takes the target's *logits* (every draft
position, then one bonus row per request) and the draft's probabilities. The adapter feeds

* target logits ``T·log p`` (−inf where p = 0), so that vLLM's own temperature (applied
  through ``SamplingMetadata.temperature``) maps them back to p: a correct engine samples
  exactly p at any T, and one that drops the target-side temperature (vLLM #9834) samples
  p^T and fails the exactness checks. vLLM's softmax gives exp(−inf) = 0, so zero-probability
  tokens stay impossible (checked in tests/test_backend_vllm.py);
* draft probabilities as float32, draft token ids as int32, as the engine has them;
* the bonus token through the wrapped real ``Sampler`` (vLLM does the same).

Randomness: one ``torch.Generator`` per call, seeded from the contract's ``rng``, handed to
vLLM as every request's generator (vLLM's seeded-request path), so runs are reproducible.

Modes: :class:`VLLMDecoder` (probabilistic, Leviathan's rule), :class:`VLLMOneHotDecoder`
(``draft_probs=None``: vLLM's one-hot-q rule, exact but with lower acceptance) and
:class:`VLLMGreedyDecoder` (temperature 0: vLLM's greedy kernel; emits the argmax prefix).
``top_k`` / ``top_p`` are applied by vLLM to the target logits; the distribution the engine
should then sample is :meth:`VLLMDecoder.expected_target` (p cut to its top-k / top-p set and
renormalised, computed here in float64 from vLLM's documented rule).

On a machine without a GPU the kernels run under Triton's interpreter; the environment for
that is set by :mod:`specgauge.stattests.decoders._triton_env` before vLLM is imported.
"""

from __future__ import annotations

import numpy as np

from specgauge.stattests.core.contract import PAD
from specgauge.stattests.decoders import _triton_env

_PURPOSE = "vLLM adapter"


def _load_vllm():
    """Import what the adapter needs; ImportError names exactly which import failed."""
    env = _triton_env.prepare(_PURPOSE)
    torch = _triton_env.import_backend("torch", _PURPOSE)
    vllm = _triton_env.import_backend("vllm", _PURPOSE)
    rs = _triton_env.import_backend("vllm.v1.sample.rejection_sampler", _PURPOSE)
    sampler_mod = _triton_env.import_backend("vllm.v1.sample.sampler", _PURPOSE)
    meta_mod = _triton_env.import_backend("vllm.v1.sample.metadata", _PURPOSE)
    spec_mod = _triton_env.import_backend("vllm.v1.spec_decode.metadata", _PURPOSE)
    lp_mod = _triton_env.import_backend("vllm.v1.sample.logits_processor", _PURPOSE)
    tt = _triton_env.import_backend("vllm.triton_utils", _PURPOSE)
    if not getattr(tt, "HAS_TRITON", False):
        raise ImportError(
            f"{_PURPOSE}: vLLM {getattr(vllm, '__version__', '?')} disabled Triton "
            "(vllm.triton_utils.HAS_TRITON is False): its rejection sampler would run a "
            "placeholder; on a CPU it needs TRITON_INTERPRET=1 and CUDA_VISIBLE_DEVICES='' "
            "set before vLLM is imported"
        )
    if env.interpret:
        # vLLM's Triton top-k/top-p asks the device for its compute units; under the
        # interpreter use vLLM's own pure-torch path instead.
        topk = _triton_env.import_backend("vllm.v1.sample.ops.topk_topp_sampler", _PURPOSE)
        topk.HAS_TRITON = False
    return env, torch, vllm, rs, sampler_mod, meta_mod, spec_mod, lp_mod


def _expected_top_k_top_p(probs: np.ndarray, top_k: int | None, top_p: float | None) -> np.ndarray:
    """vLLM's top-k then top-p rule on probabilities, in float64 (ties at the k-th value kept)."""
    out = probs.astype(np.float64, copy=True)
    if top_k is not None and top_k < out.shape[-1]:
        kth = -np.sort(-out, axis=-1)[..., top_k - 1 : top_k]
        out[out < kth] = 0.0
        out /= out.sum(axis=-1, keepdims=True)
    if top_p is not None and top_p < 1.0:
        order = np.argsort(out, axis=-1, kind="stable")  # ascending, as vLLM sorts
        sorted_p = np.take_along_axis(out, order, axis=-1)
        cum = np.cumsum(sorted_p, axis=-1)
        drop = cum <= 1.0 - top_p
        drop[..., -1] = False
        sorted_p[drop] = 0.0
        np.put_along_axis(out, order, sorted_p, axis=-1)
        out /= out.sum(axis=-1, keepdims=True)
    return out


class VLLMDecoder:
    """vLLM's ``RejectionSampler`` in its probabilistic mode (draft probabilities given).

    Options: ``temperature`` (> 0, applied by vLLM; the logits are pre-scaled so the target
    stays p), ``top_k``, ``top_p`` (applied by vLLM; see :meth:`expected_target`),
    ``device`` (default: cuda when available, else cpu through the Triton interpreter).
    """

    name = "vllm"
    greedy = False
    one_hot = False

    def __init__(
        self,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        device: str | None = None,
    ) -> None:
        if not self.greedy and not temperature > 0:
            raise ValueError("temperature must be > 0 (use VLLMGreedyDecoder for temperature 0)")
        if top_k is not None and top_k < 1:
            raise ValueError("top_k must be >= 1")
        if top_p is not None and not 0.0 < top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        (self._env, self._torch, self._vllm, rs, sampler_mod, meta_mod, spec_mod, lp_mod) = _load_vllm()
        self.temperature = 0.0 if self.greedy else float(temperature)
        self.top_k = top_k
        self.top_p = top_p
        self.device = self._torch.device(device or self._env.device)
        self._SamplingMetadata = meta_mod.SamplingMetadata
        self._SpecDecodeMetadata = spec_mod.SpecDecodeMetadata
        self._LogitsProcessors = lp_mod.LogitsProcessors
        self._sampler = rs.RejectionSampler(sampler_mod.Sampler())
        self.version = getattr(self._vllm, "__version__", "?")
        self.backend = f"vLLM {self.version} RejectionSampler on {self._env.describe()}"
        #: the TVs certified at when none is asked for (see _triton_env: coarse under the
        #: interpreter, finer on the small-vocabulary fixture; 0.01 on a GPU)
        self.certification_tv = self._env.certification_tv
        self.certification_tv_by_fixture = self._env.certification_tv_by_fixture

    # -- what the engine should sample ------------------------------------------------
    def expected_target(self, target_probs: np.ndarray) -> np.ndarray:
        """The distribution a correct engine samples at each target row, given p.

        p itself unless top-k / top-p cut it (temperature is pre-inverted, so it never
        changes the target); for the greedy mode, the one-hot argmax of p.
        """
        if self.greedy:
            out = np.zeros_like(target_probs, dtype=np.float64)
            np.put_along_axis(out, np.argmax(target_probs, axis=-1)[..., None], 1.0, axis=-1)
            return out
        if self.top_k is None and self.top_p is None:
            return np.asarray(target_probs, dtype=np.float64)
        return _expected_top_k_top_p(np.asarray(target_probs), self.top_k, self.top_p)

    # -- the contract ------------------------------------------------------------------
    def _sampling_metadata(self, batch: int, generator) -> object:
        torch = self._torch
        dev = self.device
        greedy = self.greedy
        temperature = torch.full((batch,), self.temperature, dtype=torch.float32, device=dev)
        return self._SamplingMetadata(
            temperature=None if greedy else temperature,
            all_greedy=greedy,
            all_random=not greedy,
            top_p=None if self.top_p is None else torch.full((batch,), self.top_p, dtype=torch.float32, device=dev),
            top_k=None if self.top_k is None else torch.full((batch,), self.top_k, dtype=torch.int32, device=dev),
            generators={} if greedy else {i: generator for i in range(batch)},
            max_num_logprobs=None,
            no_penalties=True,
            prompt_token_ids=None,
            frequency_penalties=torch.zeros(batch, device=dev),
            presence_penalties=torch.zeros(batch, device=dev),
            repetition_penalties=torch.ones(batch, device=dev),
            output_token_ids=[[] for _ in range(batch)],
            allowed_token_ids_mask=None,
            bad_words_token_ids={},
            logitsprocs=self._LogitsProcessors(),
            spec_token_ids=None,
        )

    def verify(
        self,
        target_probs: np.ndarray,
        draft_probs: np.ndarray,
        draft_tokens: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        torch = self._torch
        batch, gamma = draft_tokens.shape
        vocab = target_probs.shape[-1]
        if gamma == 0:
            raise ValueError("vLLM's rejection sampler needs at least one draft token per request")
        generator = torch.Generator(device=self.device)
        generator.manual_seed(int(rng.integers(2**63)))

        with np.errstate(divide="ignore"):
            logits = np.log(np.asarray(target_probs, dtype=np.float64))  # −inf where p = 0
        if not self.greedy:
            logits = logits * self.temperature  # vLLM divides by T again
        # Rows per request: γ draft positions, then the bonus row (vLLM's layout).
        logits_t = torch.from_numpy(logits.reshape(batch * (gamma + 1), vocab).astype(np.float32)).to(self.device)
        stride = gamma + 1
        base = torch.arange(batch, dtype=torch.int32) * stride
        metadata = self._SpecDecodeMetadata.make_dummy(draft_tokens.astype(np.int64).tolist(), self.device)
        metadata.target_logits_indices = (base[:, None] + torch.arange(gamma, dtype=torch.int32)[None, :]).reshape(-1).to(self.device)
        metadata.bonus_logits_indices = (base + gamma).to(self.device)
        metadata.logits_indices = torch.arange(batch * stride, dtype=torch.int32, device=self.device)
        if self.one_hot or self.greedy:
            q = None
        else:
            q = torch.from_numpy(np.ascontiguousarray(draft_probs, dtype=np.float32).reshape(batch * gamma, vocab)).to(self.device)
        with torch.no_grad():
            out = self._sampler(metadata, q, logits_t, self._sampling_metadata(batch, generator))
        emitted = out.sampled_token_ids.to("cpu").numpy().astype(np.int64)
        # vLLM pads with its PLACEHOLDER_TOKEN_ID (−1), the contract's PAD: hand it over as is.
        assert PAD == -1
        return emitted


class VLLMOneHotDecoder(VLLMDecoder):
    """vLLM's one-hot-q mode (``draft_probs=None``, as for n-gram drafting).

    Accepts a draft x with probability p(x) and resamples from p without x: exact, but
    its acceptance Σ q·p is below 1 − TV(p, q), so it must fail the law checks.
    """

    name = "vllm-onehot"
    one_hot = True


class VLLMGreedyDecoder(VLLMDecoder):
    """vLLM at temperature 0 (``all_greedy``): emits the target's argmax prefix."""

    name = "vllm-greedy"
    greedy = True

    def __init__(self, device: str | None = None) -> None:
        super().__init__(temperature=0.0, device=device)
