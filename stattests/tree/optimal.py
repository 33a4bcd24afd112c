"""How far from optimal: the best acceptance any verifier could reach with the same drafts.

Hu et al. (2025, "Towards Optimal Multi-draft Speculative Decoding") cast the optimal
acceptance of k drafts x̄ ~ Q (i.i.d. from q, or without replacement) against a target p
as a transport problem: among couplings π(x̄, y) of Q and p, maximise P(y ∈ x̄). Mass off
the drafts can always be completed, so it is the linear programme

    max Σ_{x̄} Σ_{y ∈ x̄} π(x̄, y)   s.t.  Σ_{y ∈ x̄} π(x̄, y) ≤ Q(x̄),  Σ_{x̄ ∋ y} π(x̄, y) ≤ p(y),  π ≥ 0,

with V^k·k variables: tractable for small vocabularies, solved with scipy's HiGHS. One
level of the tree (a node's siblings); a certificate reports a scheme's first-level
acceptance as a share of it.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy import optimize, sparse

from specgauge.laws import rank_chosen

MAX_VARIABLES = 2_000_000


def draft_tuples(q: np.ndarray, k: int, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered k-tuple of drafts with positive probability, and that probability."""
    q = np.asarray(q, dtype=np.float64)
    if scheme == "topk":
        top = np.argsort(-q, kind="stable")[:k]
        return top[None, :], np.ones(1)
    tuples = np.array(list(itertools.product(np.flatnonzero(q > 0), repeat=k)), dtype=np.int64).reshape(-1, k)
    if scheme == "iid":
        return tuples, np.prod(q[tuples], axis=1)
    if scheme != "without-replacement":
        raise ValueError(f"unknown scheme {scheme!r}")
    distinct = np.array([len(set(t)) == k for t in tuples.tolist()], dtype=bool)
    tuples = tuples[distinct]
    prob = np.ones(len(tuples))
    used = np.zeros(len(tuples))
    for j in range(k):
        x = q[tuples[:, j]]
        prob *= x / (1.0 - used)
        used += x
    return tuples, prob


def optimal_acceptance(p: np.ndarray, q: np.ndarray, k: int, scheme: str) -> float:
    """The LP optimum: the highest P(output ∈ drafts) of any exact verifier of k drafts."""
    p = np.asarray(p, dtype=np.float64)
    tuples, prob = draft_tuples(q, k, scheme)
    # one variable per (tuple, distinct token in it)
    rows, toks = [], []
    for i, t in enumerate(tuples.tolist()):
        for y in sorted(set(t)):
            rows.append(i)
            toks.append(y)
    n_var = len(rows)
    if n_var > MAX_VARIABLES:
        raise ValueError(f"the LP has {n_var} variables (V^k·k); above {MAX_VARIABLES}")
    cols = np.arange(n_var)
    a_tuple = sparse.csr_matrix((np.ones(n_var), (rows, cols)), shape=(len(tuples), n_var))
    a_token = sparse.csr_matrix((np.ones(n_var), (toks, cols)), shape=(p.size, n_var))
    result = optimize.linprog(-np.ones(n_var), A_ub=sparse.vstack([a_tuple, a_token]),
                              b_ub=np.concatenate([prob, p]), bounds=(0, None), method="highs")
    if not result.success:
        raise RuntimeError(f"the LP did not solve: {result.message}")
    return float(-result.fun)


def first_level_report(p: np.ndarray, q: np.ndarray, k: int, schemes=("iid", "without-replacement", "topk")
                       ) -> pd.DataFrame:
    """Per scheme: its reference rule's exact first-level acceptance (the law), the LP
    optimum for the same drafts, and the share of the optimum reached."""
    out = []
    for scheme in schemes:
        law = float(rank_chosen(p, q, k, scheme).sum())
        best = optimal_acceptance(p, q, k, scheme)
        out.append({"scheme": scheme, "siblings": k, "acceptance": law, "optimal_acceptance": best,
                    "share_of_optimal": law / best if best > 0 else 1.0})
    return pd.DataFrame(out)


def measured_share_of_optimal(run) -> dict[str, float]:
    """From a :class:`~specgauge.stattests.tree.harness.TreeRun` on a one-kind fixture: the
    measured first-level acceptance (the root's drafts accepted), the LP optimum for the
    same drafts, and the share: "acceptance at X % of the optimal first-level acceptance"."""
    fx = run.fixture
    if fx.kinds != 1:
        raise ValueError(f"{fx.name} mixes {fx.kinds} kinds of rows: the root's p and q are not one pair")
    width = run.root_chosen.shape[1] - 1
    k = int((fx.parents < 0).sum())
    measured = float(np.mean(run.root_choice < width)) if run.n else float("nan")
    best = optimal_acceptance(fx.target[0, 0, 0], fx.draft[0, 0, 0], k, run.scheme)
    return {"measured": measured, "optimal": best, "share": measured / best if best > 0 else 1.0}
