"""A discrete-event simulator of an LLM serving engine with speculative decoding.

``simulate(SimulationConfig(...))`` returns one wide report row; the rest of the public
API is the acceptance models, the profile loaders and the memory plan.
"""

from specgauge.simulator.acceptance import (AcceptanceModel, IIDAcceptance, MarkovAcceptance, PerPositionAcceptance,
                                  PerRequestAcceptance, TraceAcceptance, iid_tokens_per_pass)
from specgauge.simulator.config import SimulationConfig
from specgauge.simulator.core import memory_plan, simulate
from specgauge.errors import ConfigError
from specgauge.simulator.memory import MemoryPlan
from specgauge.simulator.policies import POLICY_FORMS, parse_policy
from specgauge.simulator.profiles import GPU, Model, known_gpus, known_models, load_gpu, load_model

__all__ = [
    "AcceptanceModel", "ConfigError", "GPU", "IIDAcceptance", "MarkovAcceptance", "MemoryPlan", "Model",
    "POLICY_FORMS", "PerPositionAcceptance", "PerRequestAcceptance", "SimulationConfig", "TraceAcceptance",
    "iid_tokens_per_pass", "known_gpus", "known_models", "load_gpu", "load_model", "memory_plan", "parse_policy",
    "simulate",
]
