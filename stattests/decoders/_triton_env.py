"""The environment vLLM's and SGLang's Triton kernels need, set by the adapters themselves.

With no GPU, both engines' verification kernels still run, through Triton's interpreter:

* ``TRITON_INTERPRET=1`` makes ``@triton.jit`` return an interpreted function (without it,
  launching a kernel on a CPU fails with "Cannot inspect kernel parameters");
* ``CUDA_VISIBLE_DEVICES=""`` keeps vLLM's Triton check on when no GPU driver is active
  (it treats an empty list as a distributed worker still starting; with the variable unset
  it finds zero drivers and swaps in a placeholder ``triton`` whose kernels do nothing).

Both are read when a kernel's module is imported (the decorator picks the interpreter, and
vLLM decides its Triton placeholder once), so :func:`prepare` must run before ``triton``'s
users are imported. It changes nothing when a CUDA device is present: the kernels then run
compiled on the GPU. The choice is made once per process.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

_KERNEL_MODULES = ("vllm", "sglang")
#: The TV the kernels are certified at when none is asked for. The interpreter verifies
#: 50-70 sequences a second on 2 cores, so most fixtures get 0.2 (about 1,000 rows); the
#: six-token fixture reaches 0.08 in about 6,000 rows (a minute and a half), where a finer
#: TV buys the most. A GPU affords 0.01 everywhere.
CPU_CERTIFICATION_TV = 0.2
CPU_FIXTURE_TV = {"seed-six-token": 0.08}
GPU_CERTIFICATION_TV = 0.01


@dataclass(frozen=True)
class TritonEnv:
    """What :func:`prepare` decided: the torch device and whether the interpreter runs."""

    device: str
    interpret: bool

    @property
    def certification_tv(self) -> float:
        return CPU_CERTIFICATION_TV if self.interpret else GPU_CERTIFICATION_TV

    @property
    def certification_tv_by_fixture(self) -> dict[str, float]:
        return dict(CPU_FIXTURE_TV) if self.interpret else {}

    def describe(self) -> str:
        if self.interpret:
            return "CPU, Triton interpreter (TRITON_INTERPRET=1)"
        return f"{self.device}, compiled Triton kernels"


_ENV: TritonEnv | None = None


def _import(name: str, purpose: str):
    """Import ``name``; an ImportError names exactly which import failed and why."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ImportError(
            f"{purpose}: `import {name}` failed ({type(exc).__name__}: {exc}); "
            "install the CPU backends with scripts/install-cpu-backends.sh"
        ) from exc
    except Exception as exc:  # a half-installed package can fail with anything
        raise ImportError(
            f"{purpose}: `import {name}` raised {type(exc).__name__}: {exc} "
            "(half-installed?); reinstall with scripts/install-cpu-backends.sh"
        ) from exc


def prepare(purpose: str) -> TritonEnv:
    """Decide GPU or interpreter, set the environment for the latter, and import triton.

    Raises ImportError (naming the failed import) when torch or triton is missing, and when
    a kernel module was already imported before the interpreter could be switched on.
    """
    global _ENV
    if _ENV is not None:
        return _ENV
    torch = _import("torch", purpose)
    has_gpu = False
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) != "":
        try:
            has_gpu = bool(torch.cuda.is_available())
        except Exception:  # a broken driver is no GPU
            has_gpu = False
    if has_gpu:
        env = TritonEnv(device="cuda", interpret=False)
    else:
        already = [m for m in _KERNEL_MODULES if sys.modules.get(m) is not None]
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            # triton.language's own @jit helpers were built for compilation when triton was
            # imported (transformers imports it), so interpreted kernels calling them fail
            already.append("triton")
        if already and os.environ.get("TRITON_INTERPRET") != "1":
            raise ImportError(
                f"{purpose}: {', '.join(already)} was imported before specgauge could set "
                "TRITON_INTERPRET=1 and CUDA_VISIBLE_DEVICES='' for a machine without a GPU; "
                "load the decoder first, or export both variables"
            )
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        env = TritonEnv(device="cpu", interpret=True)
    triton = _import("triton", purpose)
    if not hasattr(triton, "jit"):
        raise ImportError(f"{purpose}: `import triton` gave a module without triton.jit (half-installed?)")
    if env.interpret:
        knobs = getattr(triton, "knobs", None)
        runtime = getattr(knobs, "runtime", None)
        if runtime is not None and not getattr(runtime, "interpret", True):
            raise ImportError(f"{purpose}: triton {triton.__version__} ignores TRITON_INTERPRET=1")
    _ENV = env
    return env


def import_backend(name: str, purpose: str):
    """:func:`prepare`, then import ``name`` with the same error reporting."""
    prepare(purpose)
    return _import(name, purpose)
