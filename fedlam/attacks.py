r"""Client behaviours: what a client sends instead of its honest upload.

A behaviour is a small frozen object with one method, :meth:`fedlam.attacks.Behaviour.apply`, that maps what
an *honest* client would send this round (an :class:`HonestView`: its upload, its own batch
operator, the broadcast it received, the round) to the upload it actually sends. The client
(:class:`fedlam.federation.Client`, ``behaviour=``) computes the honest view and calls it; a
behaviour never sees another client's data or the archetypes. Every random choice of an
attacker (its fake pattern, which bits it corrupts) comes from its ``seed``, so ``k``
colluding attackers built with the same seed push the *same* fake, and an experiment can
recompute the fake to measure whether it entered the server memory
(:func:`fake_pattern`, :meth:`Targeted.fake_for`).

Behaviours (``make_behaviour(name, **kw)``):

``"honest"``
    The upload unchanged.
``"flip"``
    The negated operator (the paper's protocol on honest data, sign-flipped on the wire).
``"poison"``
    The rank-one operator ``xi_f xi_f^T / N`` of a fake +-1 pattern, every round, with the
    honest client's declared batch size and bulk variance and weight NaN (it does not blend).
    A spike of strength ``1/L`` in the mean ({ref}`sec-robust-spike`).
``"hidden"``
    An honest-looking upload ``(1 - a) B + a xi_f xi_f^T / N``: the client's own batch
    operator ``B`` with the fake added at the strength ``a`` of its strongest honest spike
    (default) and declared weight 1. Its trace, diagonal (``1/N``), Frobenius norm and
    spectrum look like those of an honest client holding one more archetype.
``"targeted"``
    Corrupts an archetype the federation already stores: it recovers the patterns of the
    broadcast (or, before there is one, of its own batch) with the LAM, picks one (the one
    closest to a reference vector drawn from its seed), flips a fraction ``flip_fraction`` of
    its bits (the same bits every round) and uploads the rank-one operator of the result
    (``hide=True``: inside an honest-looking upload, as ``"hidden"``).

The paper's noise attacker is not a behaviour but a data source: a client that follows the
protocol on uniform +-1 examples (``SyntheticSource(kind="noise")`` with ``"honest"``).
Derived in {ref}`sec-robust-spike`; the experiments are in {ref}`sec-exp-adversarial`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np

from fedlam._validation import _describe, check_in_range, check_nonneg_int, check_pm1
from fedlam.data import _check_alloc

__all__ = [
    "BEHAVIOURS",
    "HonestView",
    "Behaviour",
    "Honest",
    "Flip",
    "Poison",
    "Hidden",
    "Targeted",
    "make_behaviour",
    "fake_pattern",
    "fake_in_memory",
]


@dataclass(frozen=True)
class HonestView:
    """What an honest client would do this round, handed to its behaviour.

    Attributes
    ----------
    upload : Upload
        The honest upload (:class:`fedlam.protocol.Upload`: operator, batch size, weight,
        bulk variance, privacy noise).
    batch_operator : numpy.ndarray or None
        The client's own Hebbian operator ``B = eta^T eta / (N M)`` of this round (None for
        an empty batch).
    broadcast : numpy.ndarray or None
        The server's last broadcast ``A`` (None in round 0).
    t : int
        Round index.
    """

    upload: Any
    batch_operator: np.ndarray | None
    broadcast: np.ndarray | None
    t: int = 0


def _pattern_operator(x: np.ndarray) -> np.ndarray:
    """``x x^T / N`` of one +-1 pattern (float64)."""
    xf = x.astype(np.float64)
    return np.outer(xf, xf) / xf.size


def _replace(upload: Any, **changes: Any) -> Any:
    """A copy of the (frozen dataclass) upload with some fields changed."""
    if not dataclasses.is_dataclass(upload):
        raise TypeError(f"the honest upload must be a dataclass such as fedlam.protocol.Upload, "
                        f"got {_describe(upload)}")
    return dataclasses.replace(cast(Any, upload), **changes)


def _check_seed(seed: Any) -> int:
    return check_nonneg_int(seed, "seed")


def fake_pattern(seed: int, N: int) -> np.ndarray:
    """The fake +-1 pattern (int8, shape (N,)) of a poisoner with this ``seed``.

    Deterministic: colluders sharing a seed push the same pattern, and an experiment can
    recompute it to check whether it entered the server memory.
    """
    seed = _check_seed(seed)
    N = check_nonneg_int(N, "N")
    _check_alloc(N, 9, f"N = {N} (int64 draws and the int8 pattern)")
    return np.random.default_rng(seed).choice(np.array([-1, 1], dtype=np.int8), size=N)


def fake_in_memory(patterns: np.ndarray, fake: np.ndarray, archetypes: np.ndarray | None = None,
                   threshold: float = 0.5) -> bool:
    """Whether the memory holds the fake: a stored pattern overlapping ``fake`` by more than
    ``threshold`` in absolute value *and* more than it overlaps any archetype (so a faithful
    copy of the archetype a targeted fake was made from does not count)."""
    check_pm1(patterns, "patterns", ndim=2, allow_empty=True)
    check_pm1(fake, "fake", ndim=1)
    if fake.size != patterns.shape[1]:
        raise ValueError(f"fake must have length N = {patterns.shape[1]} (the patterns' columns), got {fake.size}")
    if archetypes is not None:
        check_pm1(archetypes, "archetypes", ndim=2, allow_empty=True)
        if archetypes.shape[1] != patterns.shape[1]:
            raise ValueError(f"archetypes must have N = {patterns.shape[1]} columns like patterns, "
                             f"got shape {archetypes.shape}")
    threshold = check_in_range(threshold, "threshold", 0.0, 1.0)
    if patterns.shape[0] == 0:
        return False
    N = fake.size
    P = patterns.astype(np.float64)
    of = np.abs(P @ fake.astype(np.float64)) / N
    if archetypes is not None and archetypes.shape[0]:
        oa = np.abs(P @ archetypes.T.astype(np.float64)).max(axis=1) / N
    else:
        oa = np.zeros_like(of)
    return bool(np.any((of > threshold) & (of > oa)))


class Behaviour:
    """Base class: ``apply(view) -> Upload``. Subclasses are frozen dataclasses."""

    name: ClassVar[str] = "honest"

    def apply(self, view: HonestView) -> Any:  # pragma: no cover - overridden
        """The upload this client sends, given what an honest client would send (``view``)."""
        raise NotImplementedError

    @property
    def is_attacker(self) -> bool:
        """False only for the honest behaviour."""
        return self.name != "honest"


@dataclass(frozen=True)
class Honest(Behaviour):
    """Send the honest upload unchanged."""

    name: ClassVar[str] = "honest"

    def apply(self, view: HonestView) -> Any:
        return view.upload


@dataclass(frozen=True)
class Flip(Behaviour):
    """Send the negated operator (scalars unchanged)."""

    name: ClassVar[str] = "flip"

    def apply(self, view: HonestView) -> Any:
        return _replace(view.upload, operator=-view.upload.operator)


@dataclass(frozen=True)
class Poison(Behaviour):
    """Send ``xi_f xi_f^T / N`` for the fake pattern of ``seed`` (:func:`fake_pattern`), weight NaN.

    Derived in {ref}`sec-robust-spike`.
    """

    seed: int = 0
    name: ClassVar[str] = "poison"

    def __post_init__(self) -> None:
        _check_seed(self.seed)

    def fake(self, N: int) -> np.ndarray:
        """Its fake pattern."""
        return fake_pattern(self.seed, N)

    def apply(self, view: HonestView) -> Any:
        N = view.upload.operator.shape[0]
        return _replace(view.upload, operator=_pattern_operator(self.fake(N)), weight=float("nan"),
                        dp_sigma=0.0)


def _top_eigenvalue(B: np.ndarray) -> float:
    from fedlam._eig import _eig_top

    return float(_eig_top(B, 1).values[0])


def _hide(view: HonestView, fake: np.ndarray, strength: float | None) -> Any:
    """``(1 - a) B + a fake fake^T / N`` with declared weight 1 (or the broadcast if M = 0)."""
    B = view.batch_operator
    if B is None:  # nothing to hide in: a rank-one upload at the strength of a full batch
        return _replace(view.upload, operator=_pattern_operator(fake), weight=1.0, dp_sigma=0.0)
    a = _top_eigenvalue(B) if strength is None else float(strength)
    a = min(max(a, 0.0), 1.0)
    op = (1.0 - a) * B + a * _pattern_operator(fake)
    return _replace(view.upload, operator=op, weight=1.0, dp_sigma=0.0)


@dataclass(frozen=True)
class Hidden(Behaviour):
    """Send ``(1 - a) B + a xi_f xi_f^T / N`` with declared weight 1.

    ``B`` is the client's own batch operator and ``a`` the ``strength`` of the fake (None:
    the top eigenvalue of ``B``, i.e. the strength of its strongest honest archetype). The
    diagonal stays ``1/N`` and the trace 1, like an honest batch operator.
    """

    seed: int = 0
    strength: float | None = None
    name: ClassVar[str] = "hidden"

    def __post_init__(self) -> None:
        _check_seed(self.seed)
        if self.strength is not None:
            check_in_range(self.strength, "strength", 0.0, 1.0)

    def fake(self, N: int) -> np.ndarray:
        """Its fake pattern."""
        return fake_pattern(self.seed, N)

    def apply(self, view: HonestView) -> Any:
        N = view.upload.operator.shape[0]
        return _hide(view, self.fake(N), self.strength)


@dataclass(frozen=True)
class Targeted(Behaviour):
    """Upload a corrupted copy of an archetype the federation stores.

    Each round: recover patterns with :func:`fedlam.lam.factorize` from the broadcast (from
    its own batch operator while the broadcast is empty), choose the one with the largest
    ``|<p, ref>|`` for a reference vector ``ref`` drawn from ``seed`` (oriented so that
    ``<p, ref> >= 0``), flip the same ``floor(flip_fraction N)`` bits (drawn from ``seed``)
    and upload the rank-one operator of the result (weight NaN), or hide it in an honest
    upload (``hide=True``, as :class:`Hidden`). With nothing to recover it sends the honest
    upload. The corrupted copy has overlap ``1 - 2 floor(flip_fraction N)/N`` with the
    archetype: above the LAM's de-duplication threshold (0.6) for ``flip_fraction < 0.2``,
    so it competes with the archetype instead of adding a pattern.
    """

    seed: int = 0
    flip_fraction: float = 0.15
    hide: bool = False
    name: ClassVar[str] = "targeted"

    def __post_init__(self) -> None:
        _check_seed(self.seed)
        check_in_range(self.flip_fraction, "flip_fraction", 0.0, 0.5, low_open=True, high_open=True)
        if not isinstance(self.hide, bool):
            raise TypeError(f"hide must be a bool, got {_describe(self.hide)}")

    def _ref_and_flips(self, N: int) -> tuple[np.ndarray, np.ndarray]:
        gen = np.random.default_rng(self.seed)
        ref = gen.standard_normal(N)
        flips = gen.permutation(N)[: math.floor(self.flip_fraction * N)]
        return ref, flips

    def corrupt(self, patterns: np.ndarray) -> np.ndarray | None:
        """The corrupted copy of the chosen pattern among ``patterns`` (None if there are none)."""
        check_pm1(patterns, "patterns", ndim=2, allow_empty=True)
        if patterns.shape[0] == 0:
            return None
        N = patterns.shape[1]
        ref, flips = self._ref_and_flips(N)
        proj = patterns.astype(np.float64) @ ref
        i = int(np.argmax(np.abs(proj)))
        x = patterns[i].astype(np.int8) * (np.int8(1) if proj[i] >= 0 else np.int8(-1))
        x = x.copy()
        x[flips] *= -1
        return x

    def fake_for(self, archetypes: np.ndarray) -> tuple[np.ndarray, int]:
        """The fake it uploads if it recovers ``archetypes`` exactly, and the target's index."""
        check_pm1(archetypes, "archetypes", ndim=2)
        N = archetypes.shape[1]
        ref, _ = self._ref_and_flips(N)
        target = int(np.argmax(np.abs(archetypes.astype(np.float64) @ ref)))
        fake = self.corrupt(archetypes)
        assert fake is not None  # archetypes has at least one row
        return fake, target

    def apply(self, view: HonestView) -> Any:
        from fedlam import lam

        A = view.broadcast
        src = A if (A is not None and np.any(A)) else view.batch_operator
        if src is None:
            return view.upload
        pats = lam.factorize(src, rng=self.seed).patterns
        fake = self.corrupt(pats)
        if fake is None:
            return view.upload
        if self.hide:
            return _hide(view, fake, None)
        return _replace(view.upload, operator=_pattern_operator(fake), weight=float("nan"), dp_sigma=0.0)


#: name -> behaviour class
BEHAVIOURS: dict[str, type] = {"honest": Honest, "flip": Flip, "poison": Poison, "hidden": Hidden,
                               "targeted": Targeted}


def make_behaviour(kind: str | Behaviour = "honest", **kw: Any) -> Behaviour:
    """A behaviour from its name and parameters (a Behaviour instance is returned as is).

    ``"noise"`` is rejected with a pointer to the noise data source (the paper's noise
    attacker follows the protocol; only its data are noise).
    """
    if isinstance(kind, Behaviour):
        if kw:
            raise TypeError("parameters given together with a Behaviour instance")
        return kind
    if kind == "noise":
        raise ValueError("behaviour 'noise' is a data source, not a behaviour: use an honest client "
                         "whose source draws uniform +-1 examples (SyntheticSource(kind='noise'))")
    if not isinstance(kind, str) or kind not in BEHAVIOURS:
        raise ValueError(f"behaviour must be one of {tuple(BEHAVIOURS)} or a Behaviour, got {_describe(kind)}")
    return BEHAVIOURS[kind](**kw)
