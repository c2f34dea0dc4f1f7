"""Cost of the server's defences: one round at N = 1000, L = 5 with and without each defence.

Round = ``Server.round(uploads, rng)``: aggregate (or robust aggregate), K-hat, factorization,
broadcast. The uploads are those of the paper's attacker setting (N = 1000, K = 3, M = 800,
r = 0.9): five honest clients, or four honest clients and one poisoner; round 0 (local
operators, no broadcast) and a later round (every honest client blends its batch with a
broadcast of the three archetypes at w = 0.5, which the support test removes again). The
target of issue 10: a round with ``defense="support"`` costs at most 1.5x a round without it.

Run:  python benchmarks/bench_robust.py
"""

from __future__ import annotations

import numpy as np
from _common import best_of, client_operators

from fedlam import attacks, operators
from fedlam.federation import Server
from fedlam.protocol import Upload

N, K, L, M_c, r = 1000, 3, 5, 800, 0.9


def uploads(ops, w, A, poison):
    ups = []
    for c, B in enumerate(ops):
        if poison and c == len(ops) - 1:
            fake = attacks.fake_pattern(7, N).astype(float)
            ups.append(Upload(np.outer(fake, fake) / N, M_c, float("nan"), 1 - r * r))
            continue
        U = B if A is None else w * B + (1 - w) * A
        ups.append(Upload(U, M_c, 1.0 if A is None else w, 1 - r * r))
    return ups


def main() -> None:
    xi, ops = client_operators(N, K, L, M_c, r, seed=1)
    A = operators.pattern_operator(xi)
    servers = {d: Server(defense=d) for d in (None, "support", "median", "trimmed", "krum")}
    print(f"N = {N}, K = {K}, L = {L} clients x M = {M_c} examples, r = {r}; best of 5 interleaved runs")
    for title, bc, poison in (("round 0, honest", None, False), ("round 0, one poisoner", None, True),
                              ("later round (w = 0.5, broadcast of K), honest", A, False),
                              ("later round, one poisoner", A, True)):
        ups = uploads(ops, 0.5, bc, poison)
        out = {}

        def make(d, ups=ups, bc=bc, out=out):
            def f():
                kw = {"broadcast": bc} if d is not None else {}
                out[d] = servers[d].round(ups, np.random.default_rng(0), **kw)
            return f

        t = best_of({str(d): make(d) for d in servers}, repeats=5)
        base = t["None"]
        print(f"\n{title}:")
        for d in servers:
            rr = out[d]
            fake = attacks.fake_pattern(7, N)
            stored = attacks.fake_in_memory(rr.patterns, fake, xi) if poison else False
            print(f"  defense={d!s:8s}: {t[str(d)]:7.3f} s = {t[str(d)] / base:5.2f} x no defence; "
                  f"{rr.patterns.shape[0]} patterns stored, fake stored: {stored}")


if __name__ == "__main__":
    main()
