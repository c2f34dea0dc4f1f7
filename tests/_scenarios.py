"""The scenario matrix of issue 18 item 4: an all-pairs covering design over the axes a deployment
combines (archetypes, schedule, weight rule, privacy, defence, participation, clients), each row a
40-round federation checked against the invariants a deployed private, robust federation needs.

Settings of every row: K = 3 archetypes (random at N = 160, or the paper's three Caltech-101
silhouettes at N = 784), L = 6 honest clients with M = 200 examples per round at r = 0.85, one
extra client by the ``clients`` axis, T = 40. Axis values in fedlam's terms:

- privacy ``gaussian-3x-threshold``: :class:`fedlam.privacy.GaussianMechanism` at 3 x
  :func:`fedlam.privacy.epsilon_threshold` of one upload (``L = 1``) for the weakest direction
  of the archetypes (pi = the smallest eigenvalue of Xi Xi^T / (K N): 0.29 for the random
  archetypes, 0.15 for the silhouettes; :func:`row_epsilon`). The threshold of the mean
  (``L = 6``) is sqrt(L)-ish lower, but a certifying server (the support defence, the fresh
  acceptance) votes on single uploads, so a spike must be visible in one upload; at 3 x the
  mean's threshold the silhouettes rows lose two archetypes in every defended row (measured).
  With pi = 1/K instead of the weakest direction's (the design until 2026-11-27) the silhouettes'
  weakest direction passed the BBP point but not one upload's finite-N threshold, and row 4's
  memory alternated between three silhouettes and one; row 10 (random archetypes, epsilon 2.9
  instead of 3.4) kept a retired archetype at m = 0.888 only, a random walk of one or two bits a
  round that the noise overturned (it holds at 2.9 since the server keeps a stored pattern
  against flips the noise explains, :class:`fedlam.lam._Memory`);
- defence ``none``: the server's default acceptance (:func:`fedlam.federation.default_acceptance`):
  ``"fresh"``, and under example-level privacy ``"voted"`` (leave-one-out voters; until
  2026-11-28 these rows set ``"fresh"`` explicitly there, because the default under privacy was
  the uncertified ``"refresh"``; rows 4 and 11 hold every invariant under ``"voted"`` at seeds
  100 + i and 1000 + i); ``support``/``median``: ``defense=``;
- participation ``half-asked-20%-dropout``: ``Participation(fraction=0.5, min_clients=2,
  dropout=0.2)``;
- clients ``+noise``: a client whose examples are uniform +-1; ``+poison``:
  :class:`fedlam.attacks.Poison`; ``+near-copy``: :class:`fedlam.attacks.Targeted` with
  ``flip_fraction = 0.025`` (a copy of an archetype at m = 0.95).

Invariants (:func:`violations`): nothing raises; from round 3 on no spurious pattern; K-hat
never above the number of archetypes the data have shown so far; in each of the last
``LAST_ROUNDS`` = 10 rounds every archetype shown by then is recovered at m >= 0.95 (the design
keeps every direction of the archetypes above one noised upload's finite-N threshold:
:func:`test_design_keeps_every_spike_visible`); no attacker's pattern in memory in any round;
*retention*: an archetype recovered at m >= 0.95 in a round after the burn-in stays at
m >= 0.95 in every later round. The last invariant came after the recovery window had missed a
whole memory lost for one round: in row 2 (median defence, half asked with dropouts), round 18
was answered by one honest client and the poisoner, the majority count stopped at the fake (0),
and the server stored nothing until round 19. An undecided median round now keeps the stored
patterns (``federation.Server._majority_memory``).
The recovery window replaced a check of the last round alone, which row 4 passed or failed by
the parity of a period-2 oscillation (a change of the eigensolver's rounding flipped it).
The rows run at seeds 100 + i. Measured at seeds 1000 + i (2026-11-27, not part of the tests):
13 of 14 rows held every invariant; row 5 counted K-hat = 4 in one round (27) with nothing
spurious stored and every archetype at m >= 0.985: the median operator's split of a stored
silhouette and its fresh version (m = 0.985) read as a fourth supported direction, because the
median count's memory test (Rayleigh quotient above 1/2 in the broadcast) missed the weakest
direction of three stored silhouettes (broadcast eigenvalue 0.46). The count now takes the
whole stored span as memory (:func:`fedlam.robust.majority_spike_count`); re-measured on the
four median rows (2, 3, 5, 12) at seeds 100 + i and 1000 + i, every invariant holds.
Measured on 2026-12-02 with the retention invariant and the undecided median round keeping the
memory (not part of the tests): all 14 rows hold every invariant at seeds 1000 + i, 2000 + i and
3000 + i.
Rows that break an invariant today are strict
``xfail`` with the measured failure: they are open work of issue 18, and a fix makes the run
fail until the mark is removed.

This module holds the design, the rows' federations and the invariants; the tests are in
``test_scenarios.py`` (design, rows in process) and ``test_scenarios_flower.py`` (rows on Flower).
"""

from __future__ import annotations

import functools
import os
from itertools import combinations

import numpy as np

from fedlam import attacks, data, federation, privacy
from fedlam.participation import Participation

#: the axes and their values (issue 18 item 4)
AXES: dict[str, tuple] = {
    "archetypes": ("random", "silhouettes"),
    "schedule": ("static", "drift", "novelty"),
    "weight": ("paper", "novelty", 0.5),
    "privacy": ("none", "gaussian-3x-threshold"),
    "defense": ("none", "support", "median"),
    "participation": ("everyone", "half-asked-20%-dropout"),
    "clients": ("honest", "+noise", "+poison", "+near-copy"),
}


def pairwise_rows(axes: dict[str, tuple]) -> list[dict]:
    """A deterministic all-pairs covering design (greedy, in the manner of AETG).

    Each new row starts from the smallest uncovered pair (axis order, then value order) and fills
    the other axes, the largest first, with the value that covers the most still-uncovered pairs
    with the values already chosen (ties: the first value). It stops when every pair of values of
    every two axes is covered.
    """
    names = list(axes)
    sizes = [len(axes[n]) for n in names]
    if any(s == 0 for s in sizes):
        raise ValueError(f"every axis needs at least one value, got sizes {dict(zip(names, sizes, strict=True))}")
    n = len(names)
    uncovered = {(a, i, b, j) for a, b in combinations(range(n), 2)
                 for i in range(sizes[a]) for j in range(sizes[b])}

    def key(k: int, v: int, m: int, w: int) -> tuple[int, int, int, int]:
        return (k, v, m, w) if k < m else (m, w, k, v)

    rows: list[dict] = []
    while uncovered:
        a, i, b, j = min(uncovered)
        row: list[int | None] = [None] * n
        row[a], row[b] = i, j
        for k in sorted(range(n), key=lambda k: (-sizes[k], k)):
            if row[k] is not None:
                continue
            chosen = [(m, w) for m, w in enumerate(row) if w is not None]
            row[k] = max(range(sizes[k]),
                         key=lambda v: (sum(key(k, v, m, w) in uncovered for m, w in chosen), -v))
        full = [int(v) for v in row if v is not None]
        for p, q in combinations(range(n), 2):
            uncovered.discard((p, full[p], q, full[q]))
        rows.append({names[k]: axes[names[k]][full[k]] for k in range(n)})
    return rows


ROWS = pairwise_rows(AXES)


# --- the federations of the rows --------------------------------------------------------------

K, L, M, R, T, DELTA, N_RANDOM = 3, 6, 200, 0.85, 40, 1e-5, 160
BURN_IN = 3
#: recovery is checked in each of the last LAST_ROUNDS rounds, not only the last: a memory that
#: alternates between two states (measured on row 4) passes a last-round check in one parity
LAST_ROUNDS = 10
POISON = attacks.Poison(seed=3)
NEAR_COPY = attacks.Targeted(seed=1, flip_fraction=0.025)


def row_archetypes(kind: str) -> np.ndarray:
    return data.random_archetypes(K, N_RANDOM, 7) if kind == "random" else data.structured_archetypes()


def row_schedule(kind: str, T: int = T) -> np.ndarray:
    """(T, L, K) class mixtures of the honest clients."""
    if kind == "static":
        return data.static_mixture(T, L, K)
    if kind == "drift":
        return data.sequential_drift(T, L, K)
    return data.novelty_ramp(T, L, K - 1, 1, t_start=10, ramp=5)


def row_epsilon(N: int) -> float:
    """3 x the epsilon threshold of one upload for the weakest direction of the rows' archetypes
    of dimension N (its share: the smallest eigenvalue of Xi Xi^T / (K N), 1/K for orthogonal
    archetypes, 0.15 for the three silhouettes)."""
    kind = "random" if N == N_RANDOM else "silhouettes"
    xi = row_archetypes(kind).astype(np.float64)
    pi_min = float(np.linalg.eigvalsh(xi @ xi.T / (K * N)).min())
    return 3.0 * privacy.epsilon_threshold(R, pi_min, N, M, DELTA, L=1)


def build_row(row: dict, T: int = T) -> tuple[np.ndarray, list, np.ndarray, dict]:
    """Archetypes, client specs, schedule and ``run_federation`` keywords of a row."""
    xi = row_archetypes(row["archetypes"])
    sched = row_schedule(row["schedule"], T)
    specs = [federation.ClientSpec(r=R, M=M, mixture=sched[:, c]) for c in range(L)]
    extra = row["clients"]
    if extra == "+noise":
        specs.append(federation.ClientSpec(M=M, kind="noise"))
    elif extra in ("+poison", "+near-copy"):
        behaviour = POISON if extra == "+poison" else NEAR_COPY
        specs.append(federation.ClientSpec(r=R, M=M, mixture=sched[:, 0], behaviour=behaviour))
    kw: dict = {"controller": row["weight"]}
    if row["privacy"] != "none":
        kw["privacy"] = privacy.GaussianMechanism(epsilon=row_epsilon(xi.shape[1]), delta=DELTA)
    if row["defense"] != "none":   # none: the server's default acceptance
        kw["defense"] = row["defense"]
    if row["participation"] != "everyone":
        kw["participation"] = Participation(fraction=0.5, min_clients=2, dropout=0.2)
    return xi, specs, sched, kw


def violations(row: dict, hist: federation.History, xi: np.ndarray, sched: np.ndarray) -> list[str]:
    """The invariants a row breaks (empty: all hold)."""
    out = []
    spur = np.flatnonzero(hist.spurious[BURN_IN:] > 0) + BURN_IN
    if spur.size:
        out.append(f"spurious patterns after burn-in in rounds {spur.tolist()}")
    shown_by = np.maximum.accumulate(sched.sum(axis=1) > 0, axis=0)  # (T, K) shown up to round t
    seen = shown_by.sum(axis=1)
    over = np.flatnonzero(hist.k_hat > seen)
    if over.size:
        out.append(f"K-hat above the archetypes shown in rounds {over.tolist()} "
                   f"(max {int(hist.k_hat.max())} > {int(seen.max())})")
    T_h = len(hist.k_hat)
    lost_in = {t: [k for k in range(K) if shown_by[t, k] and hist.magnetization[t][k] < 0.95]
               for t in range(max(0, T_h - LAST_ROUNDS), T_h)}
    lost_in = {t: ks for t, ks in lost_in.items() if ks}
    if lost_in:
        lost = sorted({k for ks in lost_in.values() for k in ks})
        worst = min(float(hist.magnetization[t][k]) for t, ks in lost_in.items() for k in ks)
        out.append(f"archetypes {lost} not recovered in rounds {sorted(lost_in)} of the last {LAST_ROUNDS} "
                   f"(lowest m = {worst:.3f})")
    m = np.array([np.asarray(x, dtype=np.float64) for x in hist.magnetization])
    forgot = [(t, k) for t in range(BURN_IN + 1, T_h) for k in range(K)
              if m[t, k] < 0.95 and np.any(m[BURN_IN:t, k] >= 0.95)]
    if forgot:
        out.append(f"recovered archetypes forgotten later (round, archetype): {forgot[:8]}"
                   f"{' ...' if len(forgot) > 8 else ''} (lowest m = {min(m[t, k] for t, k in forgot):.3f})")
    N = xi.shape[1]
    fake = None
    if row["clients"] == "+poison":
        fake = POISON.fake(N)
    elif row["clients"] == "+near-copy":
        fake = NEAR_COPY.fake_for(xi)[0]
    if fake is not None:
        bad = [t for t, p in enumerate(hist.patterns) if attacks.fake_in_memory(p, fake, xi)]
        if bad:
            out.append(f"the attacker's pattern is in memory in rounds {bad}")
    return out


# Rows that break an invariant today, with what was measured (issue 18 stays open on them).
# Row 5 (silhouettes under drift, median defence, half asked with dropouts) lost archetype 2 in
# rounds 33-34 until 2026-11-27: the stored version (m = 0.982) and the fresh one disagreed on
# 7 bits and the stored one missed the in-span floor by 4e-6 (fedlam.lam._Memory).
KNOWN_FAILURES: dict[int, str] = {}


def run_built(built: tuple[np.ndarray, list, np.ndarray, dict], seed: int) -> federation.History:
    """``run_federation`` over T rounds of a built row (:func:`build_row`)."""
    xi, specs, _, kw = built
    return federation.run_federation(xi, specs, T, seed, **kw)


@functools.cache
def run_row(i: int) -> federation.History:
    return run_built(build_row(ROWS[i]), 100 + i)


def label(i: int) -> str:
    r = ROWS[i]
    return f"{i}-{r['archetypes']}-{r['schedule']}-{r['defense']}-{r['clients']}"


# --- the certified private setting: rows with leave-out voters --------------------------------

#: Rows beyond the covering design, each with the support defence voting with leave-out voters
#: (``defense_params={"groups": "leave-out"}``), the certified setting near the mean's epsilon
#: threshold ({ref}`sec-robust-privacy`), composed with both archetype kinds, every schedule and
#: weight rule, both participations and an attacker or a noise client. Their privacy is 3 x the
#: epsilon threshold of the honest evidence in the weakest voter (:func:`leave_out_epsilon`), not
#: of one upload: a leave-out voter averages all uploads but one. Measured first (2026-11-28),
#: row 0 emptied its memory in a round where two clients and the poisoner answered: the weakest
#: stored silhouette direction (broadcast eigenvalue 0.46) was not memory for the support test,
#: and no voter of one or two uploads certified it. The whole stored span is now memory under
#: leave-out voters (robust.aggregate), and every row holds every invariant.
LEAVE_OUT_ROWS: tuple[dict, ...] = (
    dict(archetypes="silhouettes", schedule="drift", weight="novelty", privacy="gaussian-3x-threshold",
         defense="support-leave-out", participation="half-asked-20%-dropout", clients="+poison"),
    dict(archetypes="random", schedule="novelty", weight="paper", privacy="gaussian-3x-threshold",
         defense="support-leave-out", participation="everyone", clients="+near-copy"),
    dict(archetypes="random", schedule="static", weight=0.5, privacy="gaussian-3x-threshold",
         defense="support-leave-out", participation="half-asked-20%-dropout", clients="+noise"),
    dict(archetypes="silhouettes", schedule="novelty", weight=0.5, privacy="gaussian-3x-threshold",
         defense="support-leave-out", participation="everyone", clients="+near-copy"),
)


def leave_out_epsilon(row: dict, N: int) -> float:
    """3 x the epsilon threshold of the mean of the honest uploads in the weakest leave-out voter,
    for the weakest direction of the archetypes: ``L - 1 = 5`` of them when everyone answers (the
    voter that leaves out an honest client), 2 with half asked and 20 % dropouts (4 of the 7 clients
    asked, 3.2 answers expected, a voter of 2.2 uploads, one of which may be the extra client)."""
    kind = "random" if N == N_RANDOM else "silhouettes"
    xi = row_archetypes(kind).astype(np.float64)
    pi_min = float(np.linalg.eigvalsh(xi @ xi.T / (K * N)).min())
    honest = L - 1 if row["participation"] == "everyone" else 2
    return 3.0 * privacy.epsilon_threshold(R, pi_min, N, M, DELTA, L=honest)


def build_leave_out_row(row: dict, T: int = T) -> tuple[np.ndarray, list, np.ndarray, dict]:
    """:func:`build_row` of a leave-out row: the support defence with leave-out voters, privacy at
    :func:`leave_out_epsilon`."""
    xi, specs, sched, kw = build_row(dict(row, defense="support"), T)
    kw["defense_params"] = {"groups": "leave-out"}
    kw["privacy"] = privacy.GaussianMechanism(epsilon=leave_out_epsilon(row, xi.shape[1]), delta=DELTA)
    return xi, specs, sched, kw


@functools.cache
def run_leave_out_row(i: int) -> federation.History:
    return run_built(build_leave_out_row(LEAVE_OUT_ROWS[i]), 200 + i)


def leave_out_label(i: int) -> str:
    r = LEAVE_OUT_ROWS[i]
    return f"leave-out-{i}-{r['archetypes']}-{r['schedule']}-{r['participation']}-{r['clients']}"


# --- three rows on Flower ---------------------------------------------------------------------

#: rows run on Flower (all three weight rules, both privacy values, the fresh acceptance and the
#: support defence, partial participation with dropouts, a noise client)
FLOWER_ROWS = (0, 1, 8)
#: rounds on Flower: a Flower round of these rows takes about 9 s on loopback (measured
#: 2026-11-27: 8.3-9.6 s a round over 8 rounds of row 0), because each SuperNode sleeps 3 s after
#: an empty pull and starts a new ``flwr-clientapp`` process for every message; 40 rounds x 3 rows
#: would add about 18 minutes to CI, so the deployment runs the rows' first rounds
#: (``FEDLAM_FLOWER_ROUNDS=40`` runs the whole rows: ``pytest tests/test_scenarios_flower.py``).
#: Run so on 2026-11-27 (40 minutes for the three, on a loaded AMD EPYC): rows 0 and 8 gave the
#: in-process history in all 40 rounds; row 1 in all but the weights of round 14, a round with
#: too few answers, where the Flower history recorded the one report and run_federation none.
#: The coordinator now records a skipped round's weights as unused (``discarded_weights``);
#: row 1 re-run so after that change (11 minutes): the in-process history in all 40 rounds.
T_FLOWER = int(os.environ.get("FEDLAM_FLOWER_ROUNDS", "4"))


def flower_plan(row: dict, seed: int, T: int) -> tuple[dict, list[dict]]:
    """Run config and node configs of a (random-archetype) row: the sites of ``build_row``."""
    import json

    from fedlam.flower import config as C

    if row["archetypes"] != "random":
        raise ValueError("the Flower rows use random archetypes (a site draws them from its seed)")
    sched = row_schedule(row["schedule"], T)
    site = {"M": M, "archetype_seed": 7, "K": K, "N": N_RANDOM}
    nodes = [C.node_config_for_site(client_index=c, r=R, mixture=json.dumps(sched[:, c].tolist()), **site)
             for c in range(L)]
    extra = row["clients"]
    if extra == "+noise":
        nodes.append(C.node_config_for_site(client_index=L, kind="noise", **site))
    elif extra != "honest":
        raise ValueError(f"no Flower mapping for clients {extra!r} in these rows")
    rc: dict = {"rounds": T, "seed": seed, "num-clients": len(nodes), "N": N_RANDOM, "archetypes": "random",
                "archetype-seed": 7, "K": K, "precision": "float64", "controller": row["weight"]}
    server = {} if row["defense"] == "none" else {"defense": row["defense"]}
    rc["server-options"] = json.dumps(server)
    if row["privacy"] != "none":
        rc["client-options"] = json.dumps({"privacy": {"factory": "fedlam.privacy.GaussianMechanism",
                                                       "epsilon": row_epsilon(N_RANDOM), "delta": DELTA}})
    if row["participation"] != "everyone":
        rc.update({"fraction": 0.5, "min-clients": 2, "dropout": 0.2})
    return rc, nodes

