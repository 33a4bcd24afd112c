"""Acceptance measured on the user's prompts by teacher forcing through real models.

``models`` loads a target and its drafts behind one next-token-law interface (Hugging Face
models, the gate's contract drafters, a prompt-lookup n-gram proposer); ``prompts`` reads
the requests; ``forcing`` measures each draft's acceptance along the target's own
continuations and writes the traces the simulator replays. torch is imported only where
a Hugging Face model is used. ``specgauge acceptance`` is the command line over it.
"""
