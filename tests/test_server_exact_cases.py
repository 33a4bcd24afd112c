"""No exact server false-failed over the stop, end-of-sequence and withheld cases, at three seeds (slow tier).

Each fake here samples its known law exactly and differs only in how a sample ends: a stop
string (at the first position, after it, with an end of sequence beside it), an end of
sequence (left out, listed, named as text), a withheld trailing token (named as an id, as text,
with ends). Each is certified in both one-sample modes (the logprobs mode where it can place
the draws at all) and against a second exact run, at the default false-fail 1e-6 and three
seeds; at a declared 0.05 the stop cases' rejections stay within the binomial margin.
"""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.errors import InputFileError
from specgauge.fixtures.fake_openai import FakeOpenAI
from specgauge.stattests.server.compare import one_sample_logprobs, one_sample_reference, two_sample

PROMPTS = ["one", "two"]
TV = 0.5
CASES = {
    "stop at the first position": (dict(), ("w2",)),
    "stop after it, pieces": (dict(naming="pieces"), (" w2",)),
    "stop and end, pieces": (dict(naming="pieces", eos=0.2), ("w2",)),
    "end left out": (dict(eos=0.3), None),
    "end listed": (dict(eos=0.3, eos_listed=True), None),
    "end as text": (dict(eos=0.3, naming="text"), None),
    "withheld id": (dict(withhold_token=0), None),
    "withheld text": (dict(withhold_token=0, naming="text"), None),
    "withheld and ends": (dict(withhold_token=1, eos=0.3, naming="text"), None),
}


def certify(kw, stop, seed, rate=1e-6):
    """The case's certificates at ``seed`` (the logprobs mode left out where it cannot place a stop)."""
    run = FakeOpenAI(seed=seed, **kw).run(PROMPTS, 1000, stop=stop)
    other = FakeOpenAI(seed=seed + 100, **kw).run(PROMPTS, 1000, stop=stop)
    reference = FakeOpenAI(**{k: v for k, v in kw.items() if k in ("naming", "eos")}).reference()
    out = [one_sample_reference(run, reference, target_tv=TV, false_fail_rate=rate),
           two_sample(other, run, target_tv=TV, false_fail_rate=rate)]
    try:
        out.append(one_sample_logprobs(run, target_tv=TV, false_fail_rate=rate))
    except InputFileError as exc:  # ids name no text: a stop at the first position leaves nothing to test
        assert stop and kw.get("naming", "ids") == "ids", exc
    return out


@pytest.mark.slow  # 81 certificates, about a minute of CPU
@pytest.mark.parametrize("case", CASES)
def test_no_exact_server_is_false_failed_at_three_seeds(case):
    kw, stop = CASES[case]
    for seed in (0, 1, 2):
        for cert in certify(kw, stop, seed):
            assert cert.passed, (case, seed, cert.mode, cert.verdict())


@pytest.mark.slow  # 40 certificates
def test_the_stop_cases_keep_the_declared_rate():
    """At a declared 0.05, 20 seeds of each stop case in the reference mode and the pieces' logprobs mode."""
    rate, seeds = 0.05, 20
    rejected = {"reference": 0, "logprobs": 0}
    for seed in range(seeds):
        kw, stop = CASES["stop after it, pieces"]
        run = FakeOpenAI(seed=1000 + seed, **kw).run(PROMPTS[:1], 600, stop=stop)
        rejected["reference"] += not one_sample_reference(run, FakeOpenAI(naming="pieces").reference(),
                                                          target_tv=TV, false_fail_rate=rate).passed
        rejected["logprobs"] += not one_sample_logprobs(run, target_tv=TV, false_fail_rate=rate).passed
    margin = rate * seeds + 3 * np.sqrt(rate * (1 - rate) * seeds)
    assert max(rejected.values()) <= margin, rejected
