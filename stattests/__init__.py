"""specgauge's correctness gate, in rooms around a small core.

``core``      the statistics, the decoder and language-model contracts, the reference
              rule, sampling, deadlines and the one :class:`~.core.certificate.Certificate`
``identity``  identity testing against a known p: the proven rows, their tail bounds and
              the lower bound on the draws any test needs (a floor on the core: the rooms
              import it, the core never does)
``chain``     certification of chain verifiers: harness, checks, zoo, whole sequences
``tree``      certification of tree verifiers: harness, checks, references, zoo, optimum
``server``    probing and certifying a running OpenAI-compatible server
``decoders``  adapters of real engines (torch, HF, vLLM, SGLang, EAGLE)

Rooms import the core and identity testing, never each other. The names below load on first
use (PEP 562), so importing the package, as the pytest plugin does in every run, imports
nothing else. The first release's flat module names (``specgauge.stattests.contract`` and so
on) and the core's former identity modules (``core.identity`` and so on) still import, with
one DeprecationWarning each.
"""

import sys
import warnings
from importlib import import_module
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec

_EXPORTS = {
    "BUILTIN_DECODERS": "core.contract", "Decoder": "core.contract", "check_emitted": "core.contract",
    "load_decoder": "core.contract", "NumpyDecoder": "core.reference", "Certificate": "core.certificate",
    "TreeDecoder": "core.tree_contract", "load_tree_decoder": "core.tree_contract",
}

#: Where each module of the flat first layout now lives.
MOVED = {
    "contract": "core.contract", "reference": "core.reference", "statistics": "core.statistics",
    "sampling": "core.sampling", "deadline": "core.deadline", "tree_contract": "core.tree_contract",
    "certify": "chain.certify", "checks": "chain.checks", "harness": "chain.harness", "zoo": "chain.zoo",
    "sequences": "chain.sequences", "generate": "chain.generate", "adapter_checks": "decoders.adapter_checks",
    "tree_checks": "tree.checks", "tree_generate": "tree.generate", "tree_harness": "tree.harness",
    "tree_optimal": "tree.optimal", "tree_reference": "tree.reference", "tree_zoo": "tree.zoo",
    "server_compare": "server.compare", "server_probe": "server.probe", "server_reference": "server.reference",
    "server_stats": "server.stats",
    "core.identity": "identity.instance", "core.subsets": "identity.subsets",
    "core.lower_bound": "identity.lower_bound", "core.tail_bounds": "identity.tail_bounds",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    if name in MOVED:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _MovedModule(MetaPathFinder, Loader):
    """Imports an old flat name as the module that replaced it, warning once per name."""

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, old = fullname.partition(".stattests.")
        if prefix == __name__.rpartition(".")[0] and old in MOVED:
            return ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        new = f"{__name__}.{MOVED[spec.name.partition('.stattests.')[2]]}"
        warnings.warn(f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=2)
        module = import_module(new)
        self._real_spec = module.__spec__  # the import system stamps the old name's spec on it
        return module

    def exec_module(self, module):
        module.__spec__ = self._real_spec


if not any(isinstance(f, _MovedModule) for f in sys.meta_path):
    sys.meta_path.append(_MovedModule())
