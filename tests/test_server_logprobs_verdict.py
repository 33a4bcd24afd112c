"""A logprobs FAIL says which half failed: the sampling, or the logprobs the server reports.

The cross-check rows test the same samples against a reference's law: samples that follow it
while the reported logprobs are off them are a reporting fault (an engine reporting logprobs
before its temperature); samples off the reference are a sampling fault, whether the server
reports the wrong law it samples or the right law it does not sample.
"""

from __future__ import annotations

import pytest

from specgauge.fixtures.fake_openai import FakeOpenAI
from specgauge.stattests.server.compare import cross_checked, one_sample_logprobs

PROMPTS = ["one"]
CASES = {
    "reports another temperature": (dict(report_temperature_factor=0.5), "the reporting failed, not the sampling"),
    "samples colder and says so": (dict(sample_temperature_factor=0.5, report_sampled=True),
                                   "the sampling failed: the samples are off the cross-check's law and follow"),
    "samples colder, reports the law": (dict(sample_temperature_factor=0.5),
                                        "the sampling failed: the samples are off the cross-check's law, and off"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_verdict_names_the_half_that_failed(case):
    kw, said = CASES[case]
    run = FakeOpenAI(seed=1, **kw).run(PROMPTS, 1000)
    cert = cross_checked(run, law=FakeOpenAI().reference(), target_tv=0.5)
    assert not cert.passed and said in cert.verdict(), cert.verdict()


def test_without_a_cross_check_the_verdict_says_which_half_is_not_known():
    cert = one_sample_logprobs(FakeOpenAI(seed=1, report_temperature_factor=0.5).run(PROMPTS, 1000), target_tv=0.5)
    assert not cert.passed and "which half failed is not known" in cert.verdict(), cert.verdict()
    assert cross_checked(FakeOpenAI(seed=1).run(PROMPTS, 1000), law=FakeOpenAI().reference(), target_tv=0.5).passed
