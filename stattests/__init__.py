"""specgauge's correctness gate: the decoder contract, the statistics and the certification suite."""

from .contract import BUILTIN_DECODERS, Decoder, check_emitted, load_decoder
from specgauge.errors import DecoderLoadError, InvalidDistributionError, SpecgaugeError
from .reference import NumpyDecoder

__all__ = [
    "BUILTIN_DECODERS",
    "Decoder",
    "DecoderLoadError",
    "InvalidDistributionError",
    "NumpyDecoder",
    "SpecgaugeError",
    "check_emitted",
    "load_decoder",
]
