"""The server gate: probe a running OpenAI-compatible server into a resumable JSONL, and certify
it two-sample, with its logprobs, or against a local reference model. Uses the core only."""
