"""The project's own tests: the hypothesis profile their fuzz tests scale up under.

Registered here, before pytest configures hypothesis, so that
``pytest --hypothesis-profile slow tests/test_cli_fuzz.py`` runs ten times the examples.
"""

from hypothesis import settings

settings.register_profile("slow", deadline=None)
