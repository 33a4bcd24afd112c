"""The decoder contract: the loader, check_emitted, and the NumPy reference's edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.fixtures.pairs import SEED_DRAFT, SEED_TARGET
from specgauge.stattests.core.contract import (BUILTIN_DECODERS, DECODER_ENV, ContractViolation, check_emitted, emitted_lengths,
                                load_decoder, resolve_spec)
from specgauge.errors import DecoderLoadError, SpecgaugeError
from specgauge.stattests.core.reference import NumpyDecoder, leviathan_verify
from specgauge.stattests.core.sampling import sample_rows

# ---------------------------------------------------------------- the loader


def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_builtin_short_name_loads_the_reference():
    assert isinstance(load_decoder("numpy"), NumpyDecoder)
    assert isinstance(load_decoder("specgauge.stattests.core.reference:NumpyDecoder"), NumpyDecoder)


def test_environment_selects_the_decoder(monkeypatch):
    monkeypatch.setenv(DECODER_ENV, "specgauge.stattests.chain.zoo:accept-all")
    assert type(load_decoder(None)).__name__ == "AcceptEveryDraft"
    monkeypatch.delenv(DECODER_ENV)
    assert isinstance(load_decoder(None), NumpyDecoder)


def test_unknown_short_name_lists_the_builtins():
    with pytest.raises(DecoderLoadError) as exc:
        load_decoder("nmupy")
    message = _one_line(exc)
    assert "'nmupy'" in message
    assert all(name in message for name in BUILTIN_DECODERS)
    assert isinstance(exc.value, SpecgaugeError)


@pytest.mark.parametrize("spec, words", [
    ("no_such_module_xyz:Decoder", "cannot import module 'no_such_module_xyz'"),
    ("specgauge.stattests.core.reference:NoSuchDecoder", "has no attribute 'NoSuchDecoder'"),
    ("collections:OrderedDict", "has no verify method"),
    ("specgauge.stattests.core.contract:PAD", "neither callable nor has a verify method"),
    ("specgauge.stattests.chain.certify:CertificationSession", "cannot call"),
    (":Decoder", "MODULE:NAME"),
], ids=["import-failure", "missing-attribute", "no-verify", "not-callable", "needs-arguments", "no-module"])
def test_load_errors_are_one_clear_line(spec, words):
    with pytest.raises(DecoderLoadError) as exc:
        load_decoder(spec)
    assert words in _one_line(exc)


def test_resolve_spec_passes_module_name_through():
    assert resolve_spec("numpy") == BUILTIN_DECODERS["numpy"]
    assert resolve_spec("pkg.mod:Thing") == "pkg.mod:Thing"


# ---------------------------------------------------------------- check_emitted

DRAFTS = np.array([[1, 2, 3], [4, 0, 2]])
GOOD = np.array([[1, 2, 5, -1], [4, 0, 2, 3]])


def test_check_emitted_accepts_a_valid_result():
    out = check_emitted(GOOD.astype(np.int32), DRAFTS, 6)
    assert out.dtype == np.int64
    assert emitted_lengths(out).tolist() == [3, 4]


@pytest.mark.parametrize("emitted, words", [
    ([[1, 2, 5, -1], [4, 0, 2, 3]], "not a numpy array"),
    (np.array([[1, 2, 5], [4, 0, 2]]), "shape (2, 3), expected (2, 4)"),
    (GOOD.astype(np.float64), "dtype float64"),
    (np.where(GOOD == 5, np.nan, GOOD.astype(float)), "dtype float64"),
    (np.array([[1, 2, 6, -1], [4, 0, 2, 3]]), "token 6 out of range [0, 6) at row 0, position 2"),
    (np.array([[1, 2, -7, -1], [4, 0, 2, 3]]), "token -7 out of range"),
    (np.array([[1, -1, 5, -1], [4, 0, 2, 3]]), "token 5 after the -1 padding at row 0, position 2"),
    (np.array([[-1, -1, -1, -1], [4, 0, 2, 3]]), "row 0 emitted no token"),
    (np.array([[1, 3, 5, -1], [4, 0, 2, 3]]), "row 0 position 1: emitted 3 inside the accepted prefix but the draft token was 2"),
], ids=["not-array", "wrong-shape", "float-dtype", "nan", "out-of-range", "negative-token", "garbage-after-pad",
        "empty-row", "prefix-mismatch"])
def test_check_emitted_names_the_defect(emitted, words):
    with pytest.raises(ContractViolation) as exc:
        check_emitted(emitted, DRAFTS, 6)
    assert words in str(exc.value)


# ---------------------------------------------------------------- the reference's edge cases


def _batch(p, q, gamma, n, seed=0):
    rng = np.random.default_rng(seed)
    target = np.broadcast_to(p, (n, gamma + 1, p.size)).copy()
    draft = np.broadcast_to(q, (n, gamma, q.size)).copy()
    tokens = sample_rows(draft, rng)
    return target, draft, tokens, rng


def _verify(p, q, gamma=3, n=20_000, seed=0):
    target, draft, tokens, rng = _batch(p, q, gamma, n, seed)
    out = NumpyDecoder().verify(target, draft, tokens, rng)
    return check_emitted(out, tokens, p.size), tokens


def test_identical_p_and_q_never_reject():
    p = np.random.default_rng(1).dirichlet(np.ones(8))
    out, tokens = _verify(p, p)
    assert (emitted_lengths(out) == 4).all()
    assert (out[:, :3] == tokens).all()


def test_disjoint_supports_always_reject_into_p():
    p, q = np.r_[0.4, 0.3, 0.2, 0.1, 0, 0, 0, 0], np.r_[0, 0, 0, 0, 0.25, 0.25, 0.25, 0.25]
    out, _ = _verify(p, q)
    assert (emitted_lengths(out) == 1).all()  # α = 0
    counts = np.bincount(out[:, 0], minlength=8) / len(out)
    assert counts[4:].sum() == 0 and np.abs(counts - p).max() < 0.02


def test_one_hot_target_always_emits_its_token():
    p, q = np.eye(8)[2], np.full(8, 1 / 8)
    out, tokens = _verify(p, q)
    emitted = out[out != -1]
    assert (emitted == 2).all()
    assert ((emitted_lengths(out) > 1) == (tokens[:, 0] == 2)).all()


def test_one_hot_draft_accepts_with_probability_p():
    p = np.random.default_rng(2).dirichlet(np.ones(8))
    q = np.eye(8)[5]
    out, _ = _verify(p, q, gamma=1, n=40_000)
    accepted = emitted_lengths(out) == 2
    assert abs(accepted.mean() - p[5]) < 0.01
    rejected_tokens = out[~accepted, 0]
    assert (rejected_tokens != 5).all()  # the residual max(p − q, 0) is zero at the drafted token


def test_drafted_token_with_zero_target_probability_is_never_accepted():
    p = np.r_[0.4, 0.3, 0.0, 0.0, 0.2, 0.1]
    q = np.r_[0.2, 0.2, 0.2, 0.2, 0.1, 0.1]
    out, tokens = _verify(p, q, gamma=4)
    lengths = emitted_lengths(out)
    for k in range(4):
        reached = lengths > k + 1  # position k accepted
        assert not np.isin(tokens[reached, k], [2, 3]).any()
    assert not np.isin(out[out != -1], [2, 3]).any()


def test_residual_zero_up_to_rounding_falls_back_to_p():
    """p = q except for rounding: a forced rejection (u = 1) meets a residual of zero or a
    single ulp; the result is a valid token of p's support, never NaN or an id ≥ V."""
    p = np.array([0.1, 0.2, 0.7])
    q = np.array([1.0, 2.0, 7.0]) / 10.0  # equal to p up to an ulp
    for pair in ((p, p), (p, q), (q, p)):
        target = np.broadcast_to(pair[0], (1000, 2, 3)).copy()
        draft = np.broadcast_to(pair[1], (1000, 1, 3)).copy()
        tokens = np.full((1000, 1), 2)
        with np.errstate(all="raise"):
            out = leviathan_verify(target, draft, tokens, np.ones((1000, 1)), np.random.default_rng(3))
        out = check_emitted(out, tokens, 3)
        assert set(out[:, 0]) <= {0, 1, 2}


def test_seed_pair_is_exact_at_every_position():
    out, _ = _verify(SEED_TARGET, SEED_DRAFT, gamma=4, n=100_000)
    for k in range(5):
        col = out[:, k][out[:, k] != -1]
        freq = np.bincount(col, minlength=6) / col.size
        assert np.abs(freq - SEED_TARGET).max() < 0.01


def test_same_seed_same_output_and_inputs_untouched():
    target, draft, tokens, _ = _batch(SEED_TARGET, SEED_DRAFT, 4, 1000)
    before = (target.copy(), draft.copy(), tokens.copy())
    a = NumpyDecoder().verify(target, draft, tokens, np.random.default_rng(11))
    b = NumpyDecoder().verify(target, draft, tokens, np.random.default_rng(11))
    c = NumpyDecoder().verify(target, draft, tokens, np.random.default_rng(12))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    for original, now in zip(before, (target, draft, tokens)):
        assert np.array_equal(original, now)


# ---------------------------------------------------------------- certification runs


def test_same_seed_gives_a_byte_identical_certificate(tmp_path):
    """Sample sizes come from the TV and the fixture, never from the clock."""
    from specgauge.stattests.chain.certify import CertConfig, certify

    fixtures = ["seed-six-token", "batch3-g7", "bigram-v6-mid-L4-g1"]
    paths = []
    for i in range(2):
        cert = certify(NumpyDecoder(), CertConfig(tv=0.1, seed=3), fixtures=fixtures)  # any TV: sizes are the point
        paths.append(tmp_path / f"cert{i}.csv")
        cert.to_csv(paths[-1])
    assert paths[0].read_bytes() == paths[1].read_bytes()
    other = certify(NumpyDecoder(), CertConfig(tv=0.1, seed=4), fixtures=fixtures)
    assert not other.frame["pvalue"].equals(cert.frame["pvalue"])


class _SlowWithFinerFixture(NumpyDecoder):
    """A slow decoder's declaration: coarse by default, finer on the six-token fixture."""

    certification_tv = 0.2
    certification_tv_by_fixture = {"seed-six-token": 0.05}


def test_declared_per_fixture_tv_sizes_samples_and_explicit_tv_wins():
    """The finer fixture gets its TV (stated by its rows), the others the default; --tv overrides both."""
    from specgauge.stattests.decoders.adapter_checks import assert_declared_resolution
    from specgauge.stattests.chain.certify import ALL_FIXTURES, certify, decoder_config

    decoder = _SlowWithFinerFixture()
    config = decoder_config(decoder, seed=0)
    assert (config.tv, config.tv_for("seed-six-token"), config.tv_for("position-dependent")) == (0.2, 0.05, 0.2)
    fixtures = ["seed-six-token", "position-dependent"]
    cert = certify(decoder, config, fixtures=fixtures)
    assert cert.passed, cert.summary()
    assert_declared_resolution(cert, decoder)
    coarse = decoder_config(decoder, 0.2, seed=0)
    # the declared TV sizes its own fixture only: the others keep the coarse default's rows
    assert config.rows(ALL_FIXTURES["position-dependent"]) == coarse.rows(ALL_FIXTURES["position-dependent"])
    assert config.rows(ALL_FIXTURES["seed-six-token"]) > coarse.rows(ALL_FIXTURES["seed-six-token"])
    with pytest.raises(AssertionError):  # the check itself fails on a certificate sized coarse everywhere
        assert_declared_resolution(certify(decoder, coarse, fixtures=fixtures), decoder)
    explicit = decoder_config(decoder, 0.1)
    assert {explicit.tv_for(f) for f in fixtures} == {0.1}
    assert explicit.rows(ALL_FIXTURES["seed-six-token"]) < config.rows(ALL_FIXTURES["seed-six-token"])
    with pytest.raises(SpecgaugeError, match="seed-six-token"):
        decoder_config(type("Bad", (), {"certification_tv_by_fixture": {"seed-six-token": 1.5}})())


class _HangsOnThirdCall:
    """Answers twice (the reproducibility check), then never returns."""

    def __init__(self) -> None:
        self.calls = 0

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        import threading

        self.calls += 1
        if self.calls >= 3:
            threading.Event().wait()
        return NumpyDecoder().verify(target_probs, draft_probs, draft_tokens, rng)


def test_a_decoder_that_never_returns_fails_the_contract_naming_the_call():
    from specgauge.stattests.chain.certify import CertConfig, certify

    cert = certify(_HangsOnThirdCall(), CertConfig(tv=0.05, timeout=0.5), fixtures=["seed-six-token"])
    f = cert.frame
    contract = f[f["check"] == "contract"].iloc[0]
    assert contract["verdict"] == "fail"
    assert "verify call 1 (" in contract["message"] and "--timeout 0.5 s" in contract["message"]
    assert (f["verdict"] == "fail").all()


def test_certify_and_pytest_share_one_plan_with_the_sequences():
    """`specgauge certify` and `pytest stattests` both run certify.plan(): sequences included."""
    from specgauge.stattests.chain.certify import plan, plan_size

    checks = {c.name for c, _, _ in plan()}
    assert {"sequence-exactness", "sequence-tokens-per-pass", "independence-rows"} <= checks
    assert plan_size() == sum(1 for _ in plan())
    assert plan_size(slow=True) > plan_size()


@pytest.mark.slow
def test_slow_tier_certifies_a_production_vocabulary_in_bounded_memory():
    """262,144 tokens streamed over hundreds of calls of a few rows each (64 MiB a call):
    time-bound, not memory-bound, and certified to the resolution the fixture states."""
    from specgauge.fixtures.pairs import FIXTURES
    from specgauge.stattests.chain.certify import CertConfig, certify, plan

    slow = [f.name for f in FIXTURES.values() if f.slow]
    real = {"gemma3-dialogue-t1", "gemma3-code-t0.7-p0.9"}  # Gemma 3's laws: tests/test_gemma3_laws.py
    assert slow and all(f.name in slow or f.name in real for _, f, _ in plan(slow=True) if f.slow)
    cert = certify(NumpyDecoder(), CertConfig(), fixtures=slow)
    assert cert.passed, cert.summary()
    exact = cert.frame[cert.frame["check"] == "exactness"]
    print(cert.summary())
    # rows are sized for the positions emitted at least half the time (rows_for); rarer ones report what they reach
    from specgauge.stattests.chain.harness import emission_probability

    reach = {f"pos{k}" if k < FIXTURES[n].gamma else "bonus": e for n in slow
             for k, e in enumerate(emission_probability(FIXTURES[n]))}
    sized = exact[exact["position"].map(reach) >= 0.5]
    assert not sized.empty
    assert (sized["min_detectable_tv"].astype(float) <= max(FIXTURES[n].tv_floor for n in slow) * 1.05).all()


class _WritesItsViews(NumpyDecoder):
    """Declares broadcast inputs, then makes the view of q writable and zeroes it."""

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        draft_probs.setflags(write=True)  # numpy allows it on a view of writable memory, not on the harness's
        draft_probs[...] = 0.0
        return super().verify(target_probs, draft_probs, draft_tokens, rng)


class _WritesAndRestores(NumpyDecoder):
    """Makes the view of p writable, moves the bonus row's mass to token 0, verifies, and
    restores the view before returning: no copy compared after the call could see it."""

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        target_probs.setflags(write=True)
        saved = np.array(target_probs[0, -1])
        target_probs[:, -1] = np.eye(target_probs.shape[-1])[0]
        try:
            return super().verify(target_probs, draft_probs, draft_tokens, rng)
        finally:
            target_probs[:, -1] = saved


class _StridesAndWrites(NumpyDecoder):
    """Asks ``as_strided(writeable=True)`` for a writable alias of p's view and writes through it."""

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        alias = np.lib.stride_tricks.as_strided(target_probs, writeable=True)
        alias[0, -1, 0] += 0.25
        alias[0, -1, 0] -= 0.25
        return super().verify(target_probs, draft_probs, draft_tokens, rng)


class _WritesByPointer(NumpyDecoder):
    """Writes the law's memory through a raw pointer (ctypes), which NumPy cannot refuse, and
    leaves it written: the run fails when the law the decoder saw differs from the fixture's."""

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        import ctypes

        ctypes.c_double.from_address(draft_probs.ctypes.data).value = 0.0
        return super().verify(target_probs, draft_probs, draft_tokens, rng)


class _WritesWithoutAsking(NumpyDecoder):
    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        np.subtract(target_probs[:, :draft_probs.shape[1]], draft_probs, out=draft_probs)
        return super().verify(target_probs, draft_probs, draft_tokens, rng)


def test_broadcast_inputs_reach_only_a_decoder_that_declares_them_and_cannot_be_written():
    """The reference takes a context-free fixture's read-only views as they are (the same tokens as
    copies, tests/test_reference_paths.py). The views lie over immutable memory: making them
    writable (``setflags``, ``as_strided(writeable=True)``) raises inside verify and fails
    ``contract``, also for a decoder that would restore what it wrote before returning; a write
    by raw pointer fails the run when it ends. The fixture's own law is never touched, so no
    check reads a modified law."""
    from specgauge.fixtures.pairs import FIXTURES
    from specgauge.stattests.chain.certify import CertConfig, certify
    from specgauge.stattests.chain.harness import takes_broadcast_inputs
    from specgauge.stattests.chain.zoo import ZOO

    assert takes_broadcast_inputs(NumpyDecoder()) and not takes_broadcast_inputs(ZOO["in-place-draft-probs"]())
    fixture = FIXTURES["seed-six-token"]
    before = fixture.target.copy(), fixture.draft.copy()
    for decoder, said in ((_WritesItsViews(), "cannot set WRITEABLE flag"),
                          (_WritesAndRestores(), "cannot set WRITEABLE flag"),
                          (_StridesAndWrites(), "read-only"),
                          (_WritesByPointer(), "verify modified its input draft_probs in place"),
                          (_WritesWithoutAsking(), "read-only")):
        cert = certify(decoder, CertConfig(tv=0.2, seed=1), fixtures=["seed-six-token"],
                       checks=["contract", "pit-id"])
        contract_row = cert.frame[cert.frame["check"] == "contract"]
        assert (contract_row["verdict"] == "fail").all() and said in cert.summary(), cert.summary()
        assert np.array_equal(fixture.target, before[0]) and np.array_equal(fixture.draft, before[1])
