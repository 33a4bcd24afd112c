"""Certification of tree verifiers: the harness, the checks, the reference rules, the zoo and
the optimal-acceptance bound. Uses the core only."""
