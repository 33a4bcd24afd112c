"""specgauge's correctness gate: the decoder contract, the statistics and the certification suite.

The names below load on first use (PEP 562), so importing the package, as the pytest plugin
does in every run, imports nothing else.
"""

from importlib import import_module

_EXPORTS = {
    "BUILTIN_DECODERS": "contract", "Decoder": "contract", "check_emitted": "contract", "load_decoder": "contract",
    "NumpyDecoder": "reference",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
