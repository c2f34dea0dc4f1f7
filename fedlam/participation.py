r"""Partial participation: which clients take part in a round, and which of them answer.

One model serves the in-process simulation (:func:`fedlam.federation.run_federation`,
``participation=``) and the Flower deployment (:mod:`fedlam.flower`), so that the two can be
compared round by round. Derived in {ref}`sec-deploy-participation`.

Each round ``t`` the server

1. takes the clients *available* at ``t`` (in a deployment: the connected SuperNodes; in the
   simulation: every client whose window ``[join[c], leave[c])`` contains ``t``);
2. *asks* ``n_t = min(n_avail, max(min_clients, ceil(fraction * n_avail)))`` of them, drawn
   uniformly without replacement (all of them, with no random draw at all, when
   ``n_t = n_avail``, so ``Participation()`` reproduces full participation exactly);
3. keeps the uploads of the asked clients that *answer* in time. In the simulation each asked
   client fails independently with probability ``dropout`` (it still drew its batch and
   updated its controller: a reply that arrives after the timeout is lost, not undone --
   exactly what happens to a slow SuperNode); in a deployment the timeout decides;
4. proceeds when at least ``min_clients`` answered; otherwise the round is *skipped*: the
   server keeps its previous broadcast and nothing is aggregated.

Clients that are not asked do nothing in that round: they draw no batch and their controller
does not move. The random draws use a generator of their own (the caller passes it), in a
fixed order: first the choice of the asked clients, then one uniform per asked client for the
drop-outs (only when ``dropout > 0``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._validation import _describe, as_rng, check_in_range, check_nonneg_int, check_positive_int

__all__ = ["Participation", "RoundSample", "sample_round", "FULL", "absent_probability",
           "additive_threshold", "additive_outlier", "memory_keeps"]


@dataclass(frozen=True)
class RoundSample:
    """Who takes part in one round.

    Attributes
    ----------
    t : int
        Round index.
    available : tuple of int
        Clients available at round ``t`` (sorted).
    asked : tuple of int
        Clients sent the broadcast and asked for an upload (sorted); they draw a batch and
        update their controller.
    answered : tuple of int
        The asked clients whose upload reached the server in time (sorted); only these are
        aggregated.
    proceed : bool
        True when ``len(answered) >= min_clients``: the server aggregates and factorizes.
        False: the round is skipped (previous broadcast kept).
    """

    t: int
    available: tuple[int, ...]
    asked: tuple[int, ...]
    answered: tuple[int, ...]
    proceed: bool

    @property
    def dropped(self) -> tuple[int, ...]:
        """Asked clients that did not answer in time."""
        got = set(self.answered)
        return tuple(c for c in self.asked if c not in got)


def _check_windows(x: Any, name: str) -> tuple[int | None, ...]:
    if not isinstance(x, tuple):
        raise TypeError(f"{name} must be a tuple (one entry per client), got {_describe(x)}")
    out: list[int | None] = []
    for i, v in enumerate(x):
        if v is None:
            out.append(None)
        else:
            out.append(check_nonneg_int(v, f"{name}[{i}]"))
    return tuple(out)


@dataclass(frozen=True)
class Participation:
    """Partial-participation model of a federation (see the module notes).

    Parameters
    ----------
    fraction : float
        ``rho`` in (0, 1]: fraction of the available clients asked each round.
    min_clients : int
        Minimum number of answers for the server to proceed (>= 1); also the minimum number
        asked when that many are available.
    dropout : float
        Probability in [0, 1) that an asked client fails to answer (simulation only; in a
        deployment real failures and ``timeout`` play this part).
    timeout : float or None
        Deployment only: seconds the server waits for answers after sending a round's
        messages (None: wait for every asked node). Ignored by the simulation.
    join : tuple of int, optional
        Per-client first round of availability (late joiners); empty = everyone from round 0.
    leave : tuple of int or None, optional
        Per-client round from which the client is gone (``None``: never); empty = nobody
        leaves.

    Derived in {ref}`sec-deploy-participation`.

    Examples
    --------
    >>> import numpy as np
    >>> p = Participation(fraction=0.5, min_clients=2)
    >>> s = p.sample_round(0, range(6), np.random.default_rng(0))
    >>> len(s.asked), s.proceed
    (3, True)
    """

    fraction: float = 1.0
    min_clients: int = 1
    dropout: float = 0.0
    timeout: float | None = None
    join: tuple = ()
    leave: tuple = ()

    def __post_init__(self) -> None:
        check_in_range(self.fraction, "fraction", 0.0, 1.0, low_open=True)
        check_positive_int(self.min_clients, "min_clients")
        check_in_range(self.dropout, "dropout", 0.0, 1.0, high_open=True)
        if self.timeout is not None:
            check_in_range(self.timeout, "timeout", 0.0, None, low_open=True)
        _check_windows(self.join, "join")
        if any(v is None for v in self.join):
            raise ValueError(f"join entries must be ints (first round), got {self.join!r}")
        _check_windows(self.leave, "leave")
        if self.join and self.leave and len(self.join) != len(self.leave):
            raise ValueError(
                f"join and leave must have one entry per client each, got lengths "
                f"{len(self.join)} and {len(self.leave)}"
            )
        # not strict: either list may be empty (no join / no leave windows)
        for c, (a, b) in enumerate(zip(self.join, self.leave, strict=False)):
            if b is not None and b <= a:
                raise ValueError(f"leave[{c}] = {b} must be > join[{c}] = {a}")

    @property
    def is_full(self) -> bool:
        """True when every available client is asked and none drops out."""
        return self.fraction == 1.0 and self.dropout == 0.0

    def check_clients(self, L: int) -> None:
        """Check that ``join``/``leave`` (when given) have one entry per client and that
        ``min_clients`` can be reached with ``L`` clients."""
        L = check_positive_int(L, "L")
        if self.min_clients > L:
            raise ValueError(f"participation.min_clients must be <= L = {L} (the number of clients), "
                             f"got min_clients = {self.min_clients}: every round would be skipped")
        for name in ("join", "leave"):
            v = getattr(self, name)
            if v and len(v) != L:
                raise ValueError(f"participation.{name} must have L = {L} entries, got {len(v)}")

    def available(self, t: int, L: int) -> tuple[int, ...]:
        """Clients available at round ``t`` out of ``L`` (simulation: from ``join``/``leave``)."""
        t = check_nonneg_int(t, "t")
        self.check_clients(L)
        out = []
        for c in range(L):
            a = self.join[c] if self.join else 0
            b = self.leave[c] if self.leave else None
            if a <= t and (b is None or t < b):
                out.append(c)
        return tuple(out)

    def n_asked(self, n_available: int) -> int:
        """How many of ``n_available`` clients are asked: ``min(n, max(min_clients, ceil(rho n)))``."""
        n = check_nonneg_int(n_available, "n_available")
        # the small tolerance keeps rho * n = 3.0000000000000004 from becoming 4
        want = math.ceil(self.fraction * n - 1e-9)
        return min(n, max(self.min_clients, want))

    def sample_round(self, t: int, clients: Sequence[int] | range, rng: np.random.Generator | int) -> RoundSample:
        """Who is asked and who answers at round ``t`` (a pure function of its arguments).

        Parameters
        ----------
        t : int
            Round index (>= 0).
        clients : sequence of int
            The clients available this round (client indices, or node ids in a deployment),
            distinct non-negative ints; sorted here.
        rng : numpy.random.Generator or int
            The participation stream (not shared with anything else). Untouched when every
            available client is asked and ``dropout == 0``.

        Returns
        -------
        RoundSample
        """
        t = check_nonneg_int(t, "t")
        avail = _check_client_ids(clients)
        gen = as_rng(rng)
        n = self.n_asked(len(avail))
        if n == len(avail):
            asked = avail
        else:
            pick = gen.choice(len(avail), size=n, replace=False)
            asked = tuple(sorted(avail[i] for i in pick))
        if self.dropout > 0.0 and asked:
            fail = gen.random(len(asked)) < self.dropout
            answered = tuple(c for c, f in zip(asked, fail, strict=True) if not f)
        else:
            answered = asked
        return RoundSample(t=t, available=avail, asked=asked, answered=answered,
                           proceed=len(answered) >= self.min_clients)

    def to_dict(self) -> dict:
        """JSON-ready dictionary (``timeout`` None kept)."""
        return {"fraction": float(self.fraction), "min_clients": int(self.min_clients),
                "dropout": float(self.dropout),
                "timeout": None if self.timeout is None else float(self.timeout),
                "join": list(self.join), "leave": list(self.leave)}


#: full participation: everyone asked, nobody drops out (no random draw)
FULL = Participation()


def _check_client_ids(clients: Any) -> tuple[int, ...]:
    if isinstance(clients, (str, bytes)) or not isinstance(clients, (Sequence, range, np.ndarray)):
        raise TypeError(f"clients must be a sequence of client indices, got {_describe(clients)}")
    out = []
    for i, c in enumerate(clients):
        if isinstance(c, (bool, np.bool_)) or not isinstance(c, numbers.Integral) or c < 0:
            raise ValueError(f"clients[{i}] must be a non-negative int, got {c!r}")
        out.append(int(c))
    if len(set(out)) != len(out):
        raise ValueError(f"clients must be distinct, got {out!r}")
    return tuple(sorted(out))


def sample_round(participation: Participation | None, t: int, clients: Sequence[int] | range,
                 rng: np.random.Generator | int) -> RoundSample:
    """Module-level form of :meth:`Participation.sample_round` (``None`` = :data:`FULL`)."""
    if participation is None:
        participation = FULL
    if not isinstance(participation, Participation):
        raise TypeError(f"participation must be a Participation or None, got {_describe(participation)}")
    return participation.sample_round(t, clients, rng)


# --- closed forms of the time-varying spiked model (chapter 13) ---------------------------------

def absent_probability(L: int, holders: int, asked: int) -> float:
    """Probability that none of a class's ``holders`` sites is among ``asked`` sites drawn
    uniformly without replacement from ``L`` (hypergeometric):
    ``C(L - holders, asked) / C(L, asked)``. Derived in {ref}`sec-deploy-participation`."""
    L = check_positive_int(L, "L")
    h = check_nonneg_int(holders, "holders")
    n = check_nonneg_int(asked, "asked")
    if h > L or n > L:
        raise ValueError(f"holders and asked must be <= L = {L}, got {h} and {n}")
    if n > L - h:
        return 0.0
    if L <= 1000:  # exact big-integer ratio
        return float(math.comb(L - h, n) / math.comb(L, n))
    # C(L-h, n) / C(L, n) = (L-h)! (L-n)! / (L! (L-h-n)!), in log space (O(1) for any L)
    lg = math.lgamma
    return math.exp(lg(L - h + 1) + lg(L - n + 1) - lg(L + 1) - lg(L - h - n + 1))


def additive_threshold(sigma2: float, q: float) -> float:
    """Smallest strength ``theta`` of a deterministic rank-one term ``theta u u^T`` added to a
    Marchenko-Pastur matrix (variance ``sigma2``, ratio ``q``) that produces an outlier:
    ``sigma2 sqrt(q) (1 + sqrt(q))``. Derived in {ref}`sec-deploy-participation`."""
    s2 = check_in_range(sigma2, "sigma2", 0.0, None, low_open=True)
    q = check_in_range(q, "q", 0.0, None, low_open=True)
    return s2 * math.sqrt(q) * (1.0 + math.sqrt(q))


def additive_outlier(theta: float, sigma2: float, q: float) -> float:
    """Location of the outlier of ``W + theta u u^T`` (``W`` Marchenko-Pastur with variance
    ``sigma2`` and ratio ``q``) above the threshold: ``theta + sigma2 theta / (theta - sigma2 q)``;
    NaN below it (the top eigenvalue then sticks to the edge ``sigma2 (1 + sqrt(q))^2``).
    Derived in {ref}`sec-deploy-participation`."""
    th = check_in_range(theta, "theta", 0.0, None)
    if th <= additive_threshold(sigma2, q):
        return float("nan")
    return th + sigma2 * th / (th - sigma2 * q)


def memory_keeps(w: float, r: float, q: float, N: int) -> bool:
    """Does the blend carry an archetype through a round in which none of its holders reports?

    Every reporting client uploads ``w B + (1 - w) A``; in ``N J`` units the broadcast ``A``
    adds a rank-one term of strength ``N (1 - w)`` along the archetype, the fresh operators a
    Marchenko-Pastur bulk of variance ``w (1 - r^2)`` and ratio ``q = N / (n M)``. The archetype
    stays an outlier iff ``N (1 - w) > w (1 - r^2) sqrt(q) (1 + sqrt(q))``.
    Derived in {ref}`sec-deploy-participation`."""
    w = check_in_range(w, "w", 0.0, 1.0)
    r = check_in_range(r, "r", 0.0, 1.0)  # r = 1 (noise-free) included, as everywhere
    q = check_in_range(q, "q", 0.0, None, low_open=True)
    N = check_positive_int(N, "N")
    if w == 0.0:
        return True
    s2 = w * (1.0 - r**2)
    if s2 == 0.0:  # r = 1: no bulk, any broadcast strength N (1 - w) > 0 is an outlier
        return N * (1.0 - w) > 0.0
    return N * (1.0 - w) > additive_threshold(s2, q)
