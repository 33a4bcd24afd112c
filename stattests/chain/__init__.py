"""Certification of chain verifiers: the harness, the checks, the zoo of known bugs and whole
sequences through end-to-end generation. Uses the core only."""
