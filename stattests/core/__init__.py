"""The gate's core: statistics, the decoder and language-model contracts, the reference rule,
sampling, deadlines and the one certificate model. It imports no room."""
