"""A server round with the default acceptance (acceptance=None, which resolves to "voted":
leave-one-out voters certify the fresh parts) against the paper's acceptance (acceptance="paper",
the round issue 18 budgets against), the fresh acceptance (single-upload votes, what
defense="support" runs) and one numpy.linalg.eigh, at N = 1000, K = 6 (issue 18, "Must hold").

Two rounds: round 0 (no broadcast) and a later round in which every client blends the broadcast
of the K archetypes at w = 0.5 (the certifying acceptances then subtract it from every upload).
Under example-level DP (every client's fresh operator noised by the Gaussian mechanism at
epsilon = 4 before the blend) the default is again "voted"; its later round is timed against the
paper's on the same noised uploads, and so is the support defence with leave-out voters
(defense_params={"groups": "leave-out"}).
A later round is told the stored patterns and their precisions (``Server.round``'s ``stored`` and
``precision``, as ``run_federation`` passes them; the voted acceptance merges versions with them).
Times are the best of 5 interleaved runs, as ratios measured in the same run.

Run:  python benchmarks/bench_acceptance.py
"""

from __future__ import annotations

import numpy as np
from _common import best_of, client_operators

from fedlam.federation import Server, default_acceptance
from fedlam.metrics import spurious_count
from fedlam.operators import aggregate, pattern_operator
from fedlam.privacy import GaussianMechanism
from fedlam.protocol import Upload

N, K, L, M_c, r = 1000, 6, 3, 1000, 0.8


def main() -> None:
    xi, ops = client_operators(N, K, L, M_c, r, seed=1)
    A = pattern_operator(xi)
    first = [Upload(op, M_c, 1.0, 1 - r**2) for op in ops]
    later = [Upload(0.5 * op + 0.5 * A, M_c, 0.5, 1 - r**2) for op in ops]
    mech = GaussianMechanism(epsilon=4.0, delta=1e-5)
    rng = np.random.default_rng(7)
    noised = []
    for op in ops:
        Z, sig = mech.apply(op, M_c, rng)
        noised.append(Upload(0.5 * Z + 0.5 * A, M_c, 0.5, 1 - r**2, dp_sigma=0.5 * sig))
    dp_default = default_acceptance(privacy=mech)
    Js = aggregate(ops)
    out = {}

    def run(name, acceptance, uploads, broadcast, **server):
        # a later round gets the stored patterns and their precision, as run_federation passes them
        kw = {} if broadcast is None else {"stored": xi, "precision": np.zeros(K)}

        def f():
            srv = Server(acceptance=acceptance, **server)
            out[name] = srv.round(uploads, np.random.default_rng(0), broadcast=broadcast, **kw)
        return f

    plain_default = default_acceptance()
    fns = {"paper, round 0": run("p0", "paper", first, None), "default, round 0": run("d0", None, first, None),
           "fresh, round 0": run("f0", "fresh", first, None),
           "paper, with broadcast": run("p1", "paper", later, A), "default, with broadcast": run("d1", None, later, A),
           "fresh, with broadcast": run("f1", "fresh", later, A),
           "paper, DP": run("pd", "paper", noised, A), "default, DP": run("dd", dp_default, noised, A),
           "leave-out, DP": run("ld", None, noised, A, defense="support", defense_params={"groups": "leave-out"}),
           "eigh": lambda: np.linalg.eigh(Js)}
    t = best_of(fns, repeats=5)
    print(f"N = {N}, K = {K}, L = {L} clients x M_c = {M_c} examples, r = {r}")
    print(f"one numpy.linalg.eigh : {t['eigh']:7.3f} s")
    print(f"default acceptance without DP: {plain_default!r}")
    for key, (p, d, f) in {"round 0": ("p0", "d0", "f0"), "with broadcast": ("p1", "d1", "f1")}.items():
        tp, td, tf = t[f"paper, {key}"], t[f"default, {key}"], t[f"fresh, {key}"]
        print(f"{key:15s}: paper {tp:6.3f} s ({tp / t['eigh']:.2f} x eigh), default {td:6.3f} s "
              f"({td / t['eigh']:.2f} x eigh) = {td / tp:.2f} x paper, fresh {tf:6.3f} s "
              f"({tf / t['eigh']:.2f} x eigh) = {tf / tp:.2f} x paper; patterns paper/default/fresh "
              f"{out[p].patterns.shape[0]}/{out[d].patterns.shape[0]}/{out[f].patterns.shape[0]}, spurious "
              f"{spurious_count(out[p].patterns, xi)}/{spurious_count(out[d].patterns, xi)}/"
              f"{spurious_count(out[f].patterns, xi)}")

    tp, td = t["paper, DP"], t["default, DP"]
    print(f"DP, broadcast  : paper {tp:6.3f} s ({tp / t['eigh']:.2f} x eigh), default ({dp_default!r}) {td:6.3f} s "
          f"({td / t['eigh']:.2f} x eigh) = {td / tp:.2f} x paper; patterns paper/default "
          f"{out['pd'].patterns.shape[0]}/{out['dd'].patterns.shape[0]}, spurious "
          f"{spurious_count(out['pd'].patterns, xi)}/{spurious_count(out['dd'].patterns, xi)}")
    tl = t["leave-out, DP"]
    print(f"DP, broadcast  : support with leave-out voters {tl:6.3f} s ({tl / t['eigh']:.2f} x eigh) = "
          f"{tl / tp:.2f} x paper; patterns {out['ld'].patterns.shape[0]}, spurious "
          f"{spurious_count(out['ld'].patterns, xi)}")


if __name__ == "__main__":
    main()
