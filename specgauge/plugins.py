"""Load a user's object named ``MODULE:NAME``: a decoder, a tree decoder, a drafter.

One loader for every kind, so that each refuses the same way: NAME may be an object that
already has what the kind needs, a class, or a callable taking no required argument that
returns such an object. A module that fails to import, a missing attribute, a constructor
that raises: each is one line in the kind's own error class (a usage error, exit status 2).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Iterable


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def _path_hint(module_name: str, exc: ImportError) -> str:
    """A hint when the module sits in the working directory but the directory is not importable.

    The ``specgauge`` console script does not put the working directory on ``sys.path``
    (``python -m`` and pytest's rootdir do), so ``mymod.py`` beside the user is not found.
    """
    top = module_name.split(".")[0]
    if not isinstance(exc, ModuleNotFoundError) or exc.name != top:
        return ""
    here = Path.cwd()
    found = next((p for p in (here / f"{top}.py", here / top) if p.exists()), None)
    if found is None:
        return ""
    return (f"; {found.name} is in the working directory, which is not on the import path: "
            f"run with PYTHONPATH=. (or install it)")


def _missing(obj: object, needs: Iterable[str]) -> list[str]:
    return [name for name in needs if not hasattr(obj, name)]


def load_named(spec: str, *, noun: str, needs: tuple[str, ...], error: type[Exception]) -> object:
    """The object ``MODULE:NAME`` names, instantiated when it is a class or a factory.

    ``needs`` are the attributes the kind must have (the first is its method); what lacks
    them after instantiation is refused by name.
    """
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise error(f"{noun} {spec!r} is not of the form MODULE:NAME")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise error(f"cannot import module {module_name!r} for {noun} {spec!r}: {exc}"
                    + _path_hint(module_name, exc)) from exc
    except Exception as exc:  # noqa: BLE001 - a user's module may fail to import in any way: one line
        raise error(f"importing module {module_name!r} for {noun} {spec!r} raised "
                    f"{type(exc).__name__}: {_first_line(exc)}") from exc
    obj: object = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise error(f"module {module_name!r} has no attribute {attr_path!r}") from None
    if isinstance(obj, type) or _missing(obj, needs):
        if not callable(obj):
            raise error(f"{spec!r} is neither callable nor has a {needs[0]} method")
        try:
            obj = obj()
        except ImportError as exc:
            raise error(f"{noun} {spec!r} needs a package that is missing: {exc}") from exc
        except TypeError as exc:
            raise error(f"cannot call {spec!r} with no arguments: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - a user's constructor may raise anything: one line
            raise error(f"{spec!r}() raised {type(exc).__name__}: {_first_line(exc)}") from exc
    kind = f"a {noun} needs {', '.join(needs)}"
    if not callable(getattr(obj, needs[0], None)):
        raise error(f"{spec!r} gave {type(obj).__name__!r}, which has no {needs[0]} method ({kind})")
    missing = _missing(obj, needs)
    if missing:
        raise error(f"{spec!r} gave {type(obj).__name__!r}, which has no {', '.join(missing)} ({kind})")
    return obj
