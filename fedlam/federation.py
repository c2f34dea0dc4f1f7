r"""The federation: clients that keep their data, a server, and the round loop.

The round structure follows the paper (Section "Main model architecture" and
Algorithm ``Fede_algo``) exactly. Derived in {ref}`sec-protocol`.

* Round 0: every client draws its first batch and uploads its local Hebbian operator
  ``J_c^(0) = eta^T eta / (N M)`` (no feedback yet, ``w_c(0) = 1``).
* Round t >= 1: every client draws a new batch, computes its operator ``B``, chooses
  ``w_c(t)`` with its controller from ``B`` and the broadcast ``A = Ĵ_s^(t-1)``, and
  uploads ``w_c(t) B + (1 - w_c(t)) A`` (paper eq. (3.4)).
* Every round the server averages the uploads (equal mean, paper eq. (3.2), or
  weighted), factorizes the mean with :func:`fedlam.lam.factorize`, and broadcasts
  ``Ĵ_s^(t) = xî^T xî / N`` (:func:`fedlam.operators.pattern_operator`; the zero matrix when
  nothing is accepted).

The client side knows only its :class:`fedlam.protocol.DataSource` (a simulation's
:class:`~fedlam.protocol.SyntheticSource`, or a site's own examples,
:class:`~fedlam.protocol.ArraySource`) and sends a :class:`fedlam.protocol.Upload` (operator
plus scalars); the server sees only uploads (:meth:`Server.round`). The archetypes of a
simulation live in its sources and in the metrics of :func:`run_federation`. The Flower app
runs the same :class:`Client` and :class:`Server`.

Client kinds (:class:`ClientSpec`): ``"honest"``; ``"noise"`` -- the paper's attacker, a
client following the protocol whose examples are uniform +-1 (r = 0); ``"poison"`` --
uploads ``pattern_operator`` of a fake +-1 pattern it holds, every round, ignoring the
protocol; ``"flip"`` -- follows the protocol on honest data and uploads the negated
operator.

Edge cases: a client with an empty batch (M = 0) uploads the broadcast (zero at round 0)
with weight 0; K̂ = 0 broadcasts the zero operator, which every controller handles.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast

import numpy as np

from . import attacks, data, khat, lam, metrics, operators, refresh, robust, spectral
from . import controller as ctl
from ._validation import (
    _describe,
    as_rng,
    check_choice,
    check_in_range,
    check_nonneg_int,
    check_operator,
    check_operator_shape,
    check_pm1,
    check_positive_int,
    check_prob_vector,
    check_quality,
)
from .protocol import DataSource, SyntheticSource, Upload

__all__ = ["ACCEPTANCES", "default_acceptance", "CLIENT_KINDS", "K_RULES", "ClientSpec", "Client", "Server",
           "RoundResult", "History", "PrivacyMechanism", "run_federation"]

CLIENT_KINDS = ("honest", "noise", "poison", "flip")
#: how the server admits patterns into its memory: the paper's (whatever the aggregate's
#: factorization accepts), "fresh" (only directions that at least two uploads' fresh parts
#: certify, or that are already stored), "refresh" (the paper's, stored patterns rewritten from
#: the fresh mean) or "voted" (the fresh parts' means that leave out one upload each must all
#: certify; the default under example-level DP); see :class:`Server`
ACCEPTANCES = ("paper", "fresh", "refresh", "voted")
#: the support test that ``acceptance="voted"`` runs: leave-one-out voters, every one must certify
#: (a round with a lone upload: that upload, ``s = 1``, as the fresh acceptance's quorum)
VOTED_PARAMS = robust.check_defense("support", {"groups": robust.LEAVE_OUT, "s": 2})[1]


def _voted_params(n_uploads: int) -> dict[str, Any]:
    """``VOTED_PARAMS`` for a round of ``n_uploads`` answers (``s`` at most their number)."""
    return VOTED_PARAMS if n_uploads >= VOTED_PARAMS["s"] else dict(VOTED_PARAMS, s=max(1, n_uploads))


def default_acceptance(*, secure: bool = False, defense: str | None = None, client_privacy: Any = None,
                       privacy: Any = None) -> str:
    """The acceptance the server runs when none is given (``acceptance=None``).

    ``"voted"`` wherever the server sees every upload and no defence replaces the mean (with or
    without example-level DP): the support test with voters that each average the fresh parts of
    all uploads but one (``VOTED_PARAMS``: ``groups="leave-out"``, ``s = 2``). A direction enters
    the memory only if every voter certifies it, the whole stored span counts as memory (what was
    certified when it entered stays), and stored patterns are refreshed where every voter's fresh
    mean gives the same certain signs (:func:`fedlam.refresh.refresh_voted`). So a lone
    poisoner's fake, missing from the voter that leaves it out, never enters; of two versions of
    one archetype the more precise one stays when they differ by no more than the other's
    admission noise (:func:`fedlam.refresh.merge_versions`, with ``Server.round``'s ``stored``
    and ``precision``, which ``run_federation`` and the Flower server pass; {ref}`sec-exp-drift`);
    an archetype that stops appearing in the data is kept; and each voter's noise is about the
    mean's, so the test certifies near the mean's own privacy threshold.
    Measured (2026-12-01) on issue 18's drift (N = 784, K = 4, L = 3, r = 0.8, M = 250, 24
    rounds, novelty rule), random archetypes (3 seeds) and ten sets of four Caltech-101
    silhouettes: no spurious pattern in any round and every archetype stored exactly at the end,
    retired ones included; ``"fresh"`` (single-upload votes) stored a transient duplicate in every
    random seed and forgot the retired silhouettes in every set (their weakest stored directions,
    broadcast eigenvalue 0.28-0.46, count only ``s - 1`` votes under its rule). Re-measured
    2026-12-02 with the per-candidate floor and the precision merge on the random archetypes
    (seeds 0, 1) and two silhouette sets: no spurious pattern in any round, every archetype exact
    at the end.

    Otherwise:

    - ``defense="support"``: ``"fresh"`` (the support defence cleans the mean; the fresh
      acceptance also certifies what the factorization accepts);
    - ``"median"``, ``"trimmed"``, ``"krum"``: ``"paper"`` (the median and the trimmed mean count
      only what a strict majority of uploads certifies);
    - secure aggregation or client-level DP (the server holds only the sum): ``"paper"``, or
      ``"refresh"`` when the clients noise their uploads -- the paper's acceptance followed by
      :func:`fedlam.refresh.refresh_patterns` (each stored pattern replaced by the sign of the
      fresh part of the mean along it once that sign is certain; it does not certify what enters,
      {ref}`sec-privacy-weight`). The paper's acceptance alone keeps an archetype's first, noisy
      version under privacy while the clients' weight stays below
      :func:`fedlam.controller.correction_weight`.

    :func:`run_federation` and the Flower coordinator pass ``privacy`` here. A :class:`Server`
    built directly with ``acceptance=None`` resolves it without ``privacy`` and reads the noise
    from the uploads instead: a round whose uploads declare ``dp_sigma > 0`` runs what this
    function gives with ``privacy`` (:meth:`Server.round_acceptance`).
    Derived in {ref}`sec-robust-fresh` and {ref}`sec-robust-privacy`.
    """
    if privacy is not None and client_privacy is None and defense is None:
        return "refresh" if secure else "voted"
    sum_only = secure or client_privacy is not None or privacy is not None
    if sum_only or defense not in (None, "support"):
        return "paper"
    return "fresh" if defense == "support" else "voted"


#: K-hat rules of the server: per-client scalars (default), a fit of every upload's bulk
K_RULES = ("scalars", "fit")
#: largest number of rounds run_federation accepts (refused before any work)
MAX_ROUNDS = 100_000


class PrivacyMechanism(Protocol):
    """What a client applies to its operator before sending it (see :mod:`fedlam.privacy`).

    ``apply(operator, batch_size, rng)`` returns the noised symmetric operator and the entry
    standard deviation of the Gaussian noise added (reported in the upload, so that the
    server's K-hat edge accounts for it).
    """

    def apply(self, operator: np.ndarray, batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
        ...


@dataclass(frozen=True)
class ClientSpec:
    """What one client sees and how it behaves (a simulation's description of a client).

    Attributes
    ----------
    r : float or None
        Channel quality in (0, 1] of its examples (honest / flip; required for them unless a
        ``source`` is given). It is also the "known r" the controller may use; for a noise
        client it is only that (None: the client estimates it).
    M : int or numpy.ndarray
        Batch size per round: an int, or a (T,) int array (0 = empty batch).
    mixture : numpy.ndarray or None
        (T, K) class mixture of this client (its row of a (T, L, K) schedule); required
        for honest / flip clients without a ``source``, ignored otherwise.
    kind : {"honest", "noise", "poison", "flip"}
        Behaviour (see the module notes).
    source : DataSource or None
        The client's own data (e.g. :class:`fedlam.protocol.ArraySource` of a site's
        examples); None: a :class:`~fedlam.protocol.SyntheticSource` built from the
        archetypes, ``r``, ``M`` and ``mixture``.

    Derived in {ref}`sec-protocol`.
    """

    r: float | None = None
    M: int | np.ndarray = 300
    mixture: np.ndarray | None = None
    kind: str = "honest"
    source: Any = None
    behaviour: Any = None

    def __post_init__(self) -> None:
        check_choice(self.kind, "kind", CLIENT_KINDS)
        if self.r is not None:
            check_quality(self.r)
        if self.source is not None:
            if not isinstance(self.source, DataSource):
                raise TypeError(f"source must be a fedlam.protocol.DataSource (N and batch(t, rng)), "
                                f"got {_describe(self.source)}")
            if self.kind not in ("honest", "flip"):
                raise ValueError(f"source is only used by honest / flip clients, got kind={self.kind!r}")
            return
        if self.r is None and self.kind in ("honest", "flip"):
            raise ValueError(f"r is required for a {self.kind!r} client, got None")
        if self.kind in ("honest", "flip") and self.mixture is None:
            raise ValueError(f"mixture (T, K) is required for a {self.kind!r} client, got None")

    def batch_sizes(self, T: int) -> np.ndarray:
        """(T,) int64 batch sizes."""
        if isinstance(self.M, np.ndarray):
            if self.M.shape != (T,) or not np.issubdtype(self.M.dtype, np.integer):
                raise ValueError(f"M must be an int or a (T,) = ({T},) int array, got {_describe(self.M)}")
            if np.any(self.M < 0):
                raise ValueError(f"M must be >= 0, got min {int(self.M.min())}")
            return self.M.astype(np.int64)
        return np.full(T, check_nonneg_int(self.M, "M"), dtype=np.int64)

    def checked_mixture(self, T: int, K: int) -> np.ndarray | None:
        """The (T, K) mixture after validation (None for noise / poison clients or a given source)."""
        if self.kind in ("noise", "poison") or self.source is not None:
            return None
        mix = self.mixture
        if not isinstance(mix, np.ndarray) or mix.shape != (T, K):
            raise ValueError(f"mixture must be a (T, K) = ({T}, {K}) array, got {_describe(mix)}")
        for t in range(T):
            check_prob_vector(mix[t], f"mixture[{t}]", size=K)
        return mix.astype(np.float64)

    def make_source(self, archetypes: np.ndarray, T: int) -> DataSource | None:
        """The client's data source (None for a poisoner, which holds no data)."""
        if self.kind == "poison":
            return None
        if self.source is not None:
            if self.source.N != archetypes.shape[1]:
                raise ValueError(f"source must have N = {archetypes.shape[1]}, got N = {self.source.N}")
            return self.source
        sizes = self.batch_sizes(T)
        if self.kind == "noise":
            return SyntheticSource(archetypes, sizes, kind="noise")
        return SyntheticSource(archetypes, sizes, r=self.r, mixture=self.checked_mixture(T, archetypes.shape[0]))


class Client:
    """One federated client. Its examples never leave it.

    The examples, labels and generator are private (name-mangled attributes). Public
    surface: :meth:`observe` (draw the round's batch), :meth:`upload` (the
    :class:`~fedlam.protocol.Upload` sent to the server), :attr:`batch_size`, and, for
    metrics only, :meth:`label_counts`. Derived in {ref}`sec-protocol`.

    Parameters
    ----------
    source : DataSource or None
        Where its examples come from (None only for ``kind="poison"``).
    controller : fedlam.controller.WeightController
        Its plasticity controller (ignored by poison clients).
    rng : numpy.random.Generator or int
    kind : {"honest", "noise", "poison", "flip"}
        Behaviour (``"noise"`` behaves honestly; its source draws uniform examples).
    r : float or None
        The quality the client believes its data have (used for its reported bulk variance
        ``1 - r^2``); None: estimated from its own operator
        (:func:`fedlam.khat.client_noise_var`).
    privacy : PrivacyMechanism or None
        Example-level mechanism: noise added to the client's fresh operator ``B`` before anything
        else is computed from it (weight, blend, reported scalars), so that the whole upload is covered by the
        mechanism's guarantee; the reported bulk variance is then ``1 - r^2`` for a declared
        ``r`` and None otherwise (never estimated from the raw examples). A client-level
        mechanism (``level = "client"``, :class:`fedlam.privacy.ClientLevelMechanism`) instead
        clips the whole upload and adds its noise share (:meth:`~fedlam.privacy.ClientLevelMechanism.client_release`).
    N : int or None
        Dimension (needed only for a poisoner, which has no source).
    """

    def __init__(self, source: DataSource | None, controller: ctl.WeightController,
                 rng: np.random.Generator | int, *, kind: str = "honest", r: float | None = None,
                 privacy: PrivacyMechanism | None = None, N: int | None = None,
                 behaviour: Any = None) -> None:
        kind = check_choice(kind, "kind", CLIENT_KINDS)
        if not isinstance(controller, ctl.WeightController):
            raise TypeError(f"controller must be a WeightController, got {_describe(controller)}")
        if source is None:
            if kind != "poison":
                raise ValueError(f"source is required for a {kind!r} client, got None")
            if N is None:
                raise ValueError("N is required for a poison client (it has no source)")
            self.N = check_positive_int(N, "N", minimum=2)
        else:
            if not isinstance(source, DataSource):
                raise TypeError(f"source must be a fedlam.protocol.DataSource, got {_describe(source)}")
            self.N = int(source.N)
            if N is not None and check_positive_int(N, "N", minimum=2) != self.N:
                raise ValueError(f"N must be None or the source's dimension {self.N} (N is only needed for "
                                 f"a poison client without a source), got {N}")
        if r is not None:
            check_quality(r)
        if privacy is not None and not callable(getattr(privacy, "apply", None)):
            raise TypeError(f"privacy must have an apply(operator, batch_size, rng) method, got {_describe(privacy)}")
        if getattr(privacy, "level", None) == "client" and not isinstance(controller, ctl.ConstantController):
            # checked here too, not only in run_federation, so a Flower site refuses the combination
            raise ValueError(f"client-level DP covers the operators, but an adaptive weight rule "
                             f"({_describe(controller)}) sends a data-dependent weight in clear with every "
                             "upload; use a constant weight with privacy.ClientLevelMechanism")
        self.kind = kind
        self.behaviour = None if behaviour is None else attacks.make_behaviour(behaviour)
        self.__t = 0
        self.controller = controller
        self.__source = source
        self.__r = r
        self.__privacy = privacy
        self.__rng = as_rng(rng)
        self.__examples = np.empty((0, self.N), dtype=np.int8)
        self.__labels: np.ndarray | None = None
        self.__fake = None
        if kind == "poison":
            self.__fake = self.__rng.choice(np.array([-1, 1], dtype=np.int8), size=(1, self.N))

    @property
    def batch_size(self) -> int:
        """Size of the current batch."""
        return int(self.__examples.shape[0])

    def observe(self, t: int) -> None:
        """Draw the private batch of round ``t``."""
        self.__t = int(t)
        if self.__source is None:  # poison: holds no examples
            self.__examples = np.empty((0, self.N), dtype=np.int8)
            self.__labels = None
            return
        X, y = self.__source.batch(t, self.__rng)
        check_pm1(X, "source batch", ndim=2, allow_empty=True)
        if X.shape[1] != self.N:
            raise ValueError(f"source batch must have N = {self.N} columns, got shape {X.shape}")
        self.__examples = np.ascontiguousarray(X, dtype=np.int8)
        self.__labels = y

    def label_counts(self, K: int) -> np.ndarray:
        """(K,) archetype counts of the current batch (metrics only; zeros without labels)."""
        if self.__labels is None or self.kind not in ("honest", "flip"):
            return np.zeros(K, dtype=np.int64)
        return np.bincount(self.__labels, minlength=K).astype(np.int64)

    def _noise_var(self) -> float | None:
        if self.__r is not None:
            return 1.0 - self.__r ** 2
        return khat.client_noise_var(self.__examples)

    def upload(self, broadcast: np.ndarray | None) -> Upload:
        """The upload of this round.

        Parameters
        ----------
        broadcast : numpy.ndarray or None
            The server's last broadcast ``A``; ``None`` at round 0 of the paper's protocol
            (local operators only, ``w = 1``). A zero matrix instead runs the controller
            against the empty memory.

        Returns
        -------
        Upload
            ``weight`` is NaN for a poison client (it does not blend).
        """
        if self.kind == "poison":
            assert self.__fake is not None  # drawn in __init__ for a poison client
            return Upload(operators.pattern_operator(self.__fake), 0, float("nan"))
        M = self.batch_size
        B = operators.hebbian(self.__examples) if M > 0 else None
        sigma = 0.0
        client_level = getattr(self.__privacy, "level", None) == "client"
        if client_level:  # client-level DP (privacy.ClientLevelMechanism): acts on the whole upload
            s2 = None if self.__r is None else 1.0 - self.__r ** 2
        elif self.__privacy is not None and B is not None:
            # noise first: the weight, the blend and every scalar sent are then functions of
            # the noised operator and public quantities only (post-processing), so the
            # (epsilon, delta) guarantee covers the whole upload (chapter 11)
            B, sigma = self.__privacy.apply(B, M, self.__rng)
            s2 = None if self.__r is None else 1.0 - self.__r ** 2
        else:
            s2 = self._noise_var() if B is not None else None
        if broadcast is None:  # round 0
            op, w = (B, 1.0) if B is not None else (np.zeros((self.N, self.N)), 0.0)
        else:
            spec = None
            if B is not None and self.controller.needs_spectrum:
                spec = (ctl.local_spectrum(self.__examples) if self.__privacy is None
                        else ctl.local_spectrum(B=B, M=M, noise_sigma=sigma))
            w = float(self.controller.update(broadcast, B, M, spec))
            op = operators._blend(B, broadcast, w) if B is not None else broadcast.copy()
        if self.kind == "flip":
            op = -op
        # the noise in the upload is w times the noise added to B
        up = Upload(op, M, w, s2, float(w * sigma))
        if client_level:
            mech = cast(Any, self.__privacy)  # a fedlam.privacy.ClientLevelMechanism
            op, share = mech.client_release(op, self.__rng)  # clip (+ its noise share)
            up = Upload(op, M, w, s2, float(share))
        if self.behaviour is not None:
            up = self.behaviour.apply(attacks.HonestView(up, B, broadcast, self.__t))
        return up


@dataclass(frozen=True)
class RoundResult:
    """What the server computed in one round.

    Attributes
    ----------
    aggregate : numpy.ndarray
        The aggregate ``J_s`` it factorized.
    result : fedlam.lam.FactorizeResult
    patterns : numpy.ndarray
        int8 (K', N) patterns it broadcasts.
    weights : numpy.ndarray or None
        Aggregation weights used (None: equal).

    The broadcast operator is the property :attr:`broadcast`, built when first read.
    """

    aggregate: np.ndarray
    result: Any
    patterns: np.ndarray
    weights: np.ndarray | None
    #: (K',) per pattern: the bits noise may have flipped in it when it was admitted (its
    #: precision, :func:`fedlam.refresh.merge_versions`); None where the acceptance keeps none
    precision: np.ndarray | None = None

    @functools.cached_property
    def broadcast(self) -> np.ndarray:
        """The broadcast operator ``patterns^T patterns / N`` (zero for K' = 0), built the first
        time it is read and then kept. What crosses the wire is ``patterns`` (K' x N signs,
        :mod:`fedlam.flower.wire`); each client builds the N x N operator it blends, so the
        server's round does not ({ref}`sec-cost`)."""
        return operators.pattern_operator(self.patterns)

    @property
    def warm_start(self) -> np.ndarray | None:
        """(N, j) detected eigenvectors that warm-start the next round's spectrum (None: none)."""
        vec = getattr(self.result, "vectors", None)
        return vec if isinstance(vec, np.ndarray) and vec.ndim == 2 and vec.shape[1] else None


def _predicted_overlaps(result: Any) -> np.ndarray | None:
    """The in-span search's predicted overlaps of the detected eigenvectors (``extras["overlaps"]``
    of a factorize result), or None (the LAM search predicts none)."""
    extras = getattr(result, "extras", None)
    return extras.get("overlaps") if isinstance(extras, dict) else None


class Server:
    """The server: aggregates uploads, factorizes, broadcasts. Derived in {ref}`sec-protocol`.

    K-hat of the aggregate: the uploads have different noise levels (an honest client at
    r = 0.9 has bulk variance 0.19, a noise client 1, a client that uploads the broadcast
    none) and sizes (a phone's 5 examples, a hospital's 500), so the bulk of the mean is the
    free convolution of their bulks. With ``k_rule="scalars"`` (default) its components come
    from each upload's scalars (:func:`fedlam.khat.components_from_uploads`: batch size, blend
    weight, bulk variance, privacy noise) -- ``O(L)`` work and valid for uploads of any size
    and under secure aggregation; ``k_rule="fit"`` fits every upload's bulk from its own top
    eigenvalues (one partial eigendecomposition per upload; it fails for uploads of a few
    examples, which have no bulk to fit). ``lam_params={"k_method": ...}`` overrides both with
    a single-operator rule on the aggregate (e.g. ``"mp"``, which over-counts mixtures of
    noise levels). Derived in {ref}`sec-bbp-threshold`.

    Parameters
    ----------
    aggregation : {"equal", "batch"} or numpy.ndarray
        ``"equal"``: mean over clients (the paper); ``"batch"``: weights proportional to the
        clients' batch sizes this round (equal if all are empty); or a fixed (L,) probability
        vector.
    lam_params : dict, optional
        Keyword parameters of :func:`fedlam.lam.factorize`.
    k_rule : {"scalars", "fit"}
    secure : bool
        Secure aggregation: the server sees only the sum of the uploads and their scalars
        (``k_rule`` must be ``"scalars"``; a negated upload cannot be recognised).
    defense, defense_params
        A server defence of :mod:`fedlam.robust` and its parameters (None: the plain mean).
    acceptance : {"fresh", "paper", "refresh", "voted"} or None
        None (default): :func:`default_acceptance` -- ``"voted"`` wherever the server sees every
        upload and no defence replaces the mean, with or without example-level privacy;
        ``"fresh"`` with ``defense="support"``; otherwise ``"paper"`` (``"refresh"`` when the
        clients noise their uploads under secure aggregation). The resolved value is
        :attr:`acceptance`; a round whose uploads declare privacy noise resolves it again
        (:meth:`round_acceptance`).
        ``"voted"``: the fresh parts are certified by voters that each average all uploads but
        one (``VOTED_PARAMS``, the support test's leave-out voters), every voter must
        certify a direction, and stored patterns are refreshed where every voter agrees
        (:func:`fedlam.refresh.refresh_voted`): certification near the mean's privacy
        threshold, where single uploads show nothing (needs every upload, no defence, no
        client-level DP; {ref}`sec-privacy-weight`). ``"paper"``:
        the memory is whatever the
        factorization of the aggregate accepts (the paper's server; a noisy duplicate of a stored
        pattern, a lone poisoner's fake can enter). ``"refresh"``: the paper's acceptance, then
        every pattern is replaced by the sign of the mean minus the broadcast's share along it
        when that sign is certain (:func:`fedlam.refresh.refresh_patterns`; needs the
        ``broadcast``, runs under secure aggregation, not with a defence or client-level DP;
        {ref}`sec-privacy-weight`). ``"fresh"``
        (:func:`fedlam.robust.fresh_aggregate`): before the factorization,
        every detected direction of the aggregate is certified against the uploads' *fresh
        parts* (each upload minus the broadcast it blended: the client's new evidence, never the
        server's own broadcast) by the support test of :mod:`fedlam.robust` with a quorum of
        ``s = 2`` uploads (1 when a single upload answers). A direction that fewer than ``s``
        fresh parts certify and that is not already stored is replaced by the bulk level, so
        a pattern enters the memory only when two clients' fresh data show it, and stays while it
        is stored (an archetype that stops appearing in the data is not forgotten); a direction
        the broadcast alone reinforces, e.g. a noisy duplicate of a stored pattern, does not
        enter. Why two: one upload would certify whatever it holds, a poisoner's fake first of
        all, and a near-copy of an archetype (overlap 0.95) would rank with the honest
        clients' direction and could be stored in its place; two agreeing fresh parts keep out
        one attacker and prefer the direction the honest data hold
        ({prf:ref}`thm-robust-support`). The price: a new archetype enters only once two
        clients certify it in the same round (never while a single client holds it; on the
        scenario matrix's novelty ramp, held by two or more clients, in the same round as with a
        quorum of 1, or at most one round later under privacy). ``defense="support"``
        certifies with its own ``s`` instead (``defense_params={"s": 1}`` is the quorum of 1).
        Derived in {ref}`sec-robust-fresh`.
        It needs every upload's operator (no secure aggregation) and runs without a defence or
        with ``defense="support"``.
        Derived in {ref}`sec-robust-support`.
    """

    def __init__(self, aggregation: str | np.ndarray = "equal", lam_params: dict | None = None, *,
                 k_rule: str = "scalars", secure: bool = False, defense: str | None = None,
                 defense_params: dict | None = None, client_privacy: Any = None,
                 acceptance: str | None = None) -> None:
        if isinstance(aggregation, str):
            check_choice(aggregation, "aggregation", ("equal", "batch"))
        elif not isinstance(aggregation, np.ndarray):
            raise TypeError(
                f"aggregation must be 'equal', 'batch' or an (L,) array, got {_describe(aggregation)}"
            )
        if lam_params is not None and not isinstance(lam_params, dict):
            raise TypeError(f"lam_params must be a dict, got {_describe(lam_params)}")
        self.k_rule = check_choice(k_rule, "k_rule", K_RULES)
        if not isinstance(secure, bool):
            raise TypeError(f"secure must be a bool, got {_describe(secure)}")
        if secure and self.k_rule != "scalars":
            raise ValueError(f"secure aggregation needs k_rule='scalars' (no per-upload operators), got {k_rule!r}")
        self.aggregation = aggregation
        self.lam_params = dict(lam_params or {})
        # validate the LAM options once, here, not inside every round
        lam._make_params(None, {k: v for k, v in self.lam_params.items()})
        self.secure = secure
        self.defense, self.defense_params = robust.check_defense(defense, defense_params)
        if secure and self.defense is not None:
            raise ValueError(f"defense={defense!r} needs every client's upload; it cannot run under secure aggregation")
        if client_privacy is not None and getattr(client_privacy, "level", None) != "client":
            raise TypeError("client_privacy must be a fedlam.privacy.ClientLevelMechanism, "
                            f"got {_describe(client_privacy)}")
        if client_privacy is not None and (self.defense is not None or not (isinstance(aggregation, str)
                                                                          and aggregation == "equal")):
            raise ValueError("client-level DP is calibrated to the equal mean of clipped uploads; it needs "
                             f"aggregation='equal' and no defense, got aggregation={_describe(aggregation)}, "
                             f"defense={defense!r}")
        #: client-level DP (fedlam.privacy.ClientLevelMechanism): noise on the mean, reports counted
        self.client_privacy = client_privacy
        #: acceptance=None: a round whose uploads declare privacy noise runs the paper's
        #: acceptance (what default_acceptance gives when the clients noise their uploads)
        self._default_acceptance = acceptance is None
        if acceptance is None:
            acceptance = default_acceptance(secure=secure, defense=self.defense, client_privacy=client_privacy)
        #: the resolved acceptance
        self.acceptance = check_choice(acceptance, "acceptance", ACCEPTANCES)
        if self.acceptance == "fresh":
            if secure:
                raise ValueError("acceptance='fresh' needs every client's upload; it cannot run under secure "
                                 "aggregation (use acceptance='paper')")
            if self.defense not in (None, "support"):
                raise ValueError(f"acceptance='fresh' runs with defense=None or 'support', got defense={defense!r} "
                                 f"(use acceptance='paper' with it)")
            if client_privacy is not None:
                raise ValueError("acceptance='fresh' certifies patterns against each client's own upload, which "
                                 "client-level DP (noise on the mean only) does not protect; use "
                                 "acceptance='paper' with client_privacy")
        if self.acceptance == "voted" and (secure or self.defense is not None or client_privacy is not None):
            raise ValueError("acceptance='voted' certifies against every client's fresh upload with leave-out voters; "
                             "it needs every upload (no secure aggregation), no defence (defense='support' with "
                             "defense_params={'groups': 'leave-out'} is the same test with its own parameters) and "
                             f"no client-level DP, got secure={secure}, defense={defense!r}, client_privacy="
                             f"{_describe(client_privacy)}")
        if self.acceptance == "refresh" and (self.defense is not None or client_privacy is not None):
            raise ValueError("acceptance='refresh' corrects the stored patterns from the plain mean of the uploads "
                             "minus the broadcast they blended; it runs without a defence and without client-level "
                             f"DP (which clips every upload), got defense={defense!r}, client_privacy="
                             f"{_describe(client_privacy)} (use acceptance='paper' with them)")

    def round_acceptance(self, uploads: Sequence[Upload]) -> str:
        """The acceptance a round with these uploads runs: :attr:`acceptance`, except that a
        server built with ``acceptance=None`` runs the paper's acceptance in a round where an
        upload declares example-level privacy noise (``dp_sigma > 0``) what
        :func:`default_acceptance` gives when told that the clients noise their uploads (the fresh
        acceptance votes on single uploads, whose spikes such noise hides; ``"voted"`` votes
        with means of all uploads but one)."""
        if not self._default_acceptance:
            return self.acceptance
        noised = any((getattr(u, "dp_sigma", 0.0) or 0.0) > 0.0 for u in uploads)
        return default_acceptance(secure=self.secure, defense=self.defense, client_privacy=self.client_privacy,
                                  privacy=True if noised else None)

    @property
    def needs_uploads(self) -> bool:
        """Whether :meth:`round` needs every upload's operator and the last broadcast."""
        return self.defense is not None or self.acceptance in ("fresh", "voted")

    @property
    def needs_broadcast(self) -> bool:
        """Whether :meth:`round` reads the last broadcast: a server that reads every upload, and
        one whose rounds may refresh the stored patterns from the fresh mean (``"refresh"``,
        also what the default acceptance runs in a round whose uploads declare privacy noise)."""
        return (self.needs_uploads or self.acceptance == "refresh"
                or (self._default_acceptance and self.defense is None and self.client_privacy is None))

    def __repr__(self) -> str:
        agg = self.aggregation if isinstance(self.aggregation, str) else "fixed"
        acc = f", acceptance={self.acceptance!r}"
        return (f"Server(aggregation={agg!r}, k_rule={self.k_rule!r}, secure={self.secure}, "
                f"lam_params={self.lam_params}{acc})")

    def weights(self, L: int, batch_sizes: np.ndarray | None = None) -> np.ndarray | None:
        """Aggregation weights (L,) of this round; None for the equal mean."""
        if isinstance(self.aggregation, np.ndarray):
            return check_prob_vector(self.aggregation, "aggregation", size=L)
        if self.aggregation == "batch" and batch_sizes is not None and batch_sizes.sum() > 0:
            return batch_sizes / batch_sizes.sum()
        return None

    def aggregate(self, uploads: Sequence[Upload], weights: np.ndarray | None = None) -> np.ndarray:
        """Mean (or weighted mean) of the uploaded operators (checked by :meth:`round`)."""
        ops = [u.operator for u in uploads]
        if any(op is None for op in ops):
            raise ValueError("every upload must carry its operator to be aggregated")
        ops = [self._clip(cast(np.ndarray, op)) for op in ops]
        return operators._aggregate(cast("list[np.ndarray]", ops), weights)  # no None (checked above)

    def _clip(self, op: np.ndarray) -> np.ndarray:
        """Central client-level DP: the trusted server clips every upload itself (a client that
        skips clipping gains nothing); honest, already clipped uploads are unchanged."""
        cp = self.client_privacy
        if cp is None or cp.variant != "central":
            return op
        from .privacy import clip_operator

        return clip_operator(op, cp.clip)[0]

    def factorize(self, J: np.ndarray, rng: np.random.Generator, uploads: Sequence[Upload],
                  weights: np.ndarray | None = None, component_k: int = 16,
                  start: np.ndarray | None = None, extra_sigma: float = 0.0) -> Any:
        """Run :func:`fedlam.lam.factorize` on the aggregate with the server's K-hat rule.

        Parameters
        ----------
        J : numpy.ndarray
            The aggregate ``sum_c w_c U_c``.
        rng : numpy.random.Generator
        uploads : sequence of Upload
            The round's uploads (operators may be None under secure aggregation).
        weights : numpy.ndarray, optional
            Aggregation weights (None: equal).
        component_k : int
            Leading eigenvalues per upload for ``k_rule="fit"``; take ``>= 2 K_b + 8`` with
            ``K_b`` the rank of the last broadcast (it is blended into every honest upload).
        start : numpy.ndarray or None
            (N, j) approximate leading eigenvectors of ``J`` (the previous round's detected
            ones) that warm-start the eigensolver (:func:`fedlam.lam.factorize`).
        extra_sigma : float
            Off-diagonal entry std of Gaussian noise the server added to ``J`` itself (central
            client-level DP), independent of the uploads' own noise.
        """
        check_operator(J, "J")
        return self._factorize(J, rng, uploads, weights, component_k, start, extra_sigma)

    def _factorize(self, J: np.ndarray, rng: np.random.Generator, uploads: Sequence[Upload],
                   weights: np.ndarray | None, component_k: int, start: np.ndarray | None,
                   extra_sigma: float = 0.0) -> Any:
        """:meth:`factorize` of an aggregate validated by :meth:`round` (no second check)."""
        params = dict(self.lam_params)
        params["start"] = start
        L = len(uploads)
        if "k_method" in params:
            return lam._factorize(J, rng=rng, **params)
        params["k_method"] = "free"
        if self.k_rule == "fit":
            # k_rule="fit" excludes secure aggregation: round() passes uploads with their operators
            comps: Sequence[khat.Component | khat.BulkComponent] = [
                khat._fit_operator(cast(np.ndarray, u.operator), component_k) for u in uploads]
            om = weights if weights is not None else np.full(L, 1.0 / L)
            sig = math.sqrt(sum(float(o) ** 2 * u.dp_sigma ** 2 for o, u in zip(om, uploads, strict=True))
                            + extra_sigma ** 2)
            return lam._factorize(J, rng=rng, components=comps, component_weights=om, noise_sigma=sig, **params)
        comps, noise_var = khat.components_from_uploads(uploads, weights, N=J.shape[0])
        if not comps:  # no upload has a bulk (e.g. every client at w = 0): a bulk-free component
            comps = [khat.Component(0.0, 1.0)]
        return lam._factorize(J, rng=rng, components=comps,
                              noise_sigma=math.sqrt(noise_var / J.shape[0] + extra_sigma ** 2), **params)

    def round(self, uploads: Sequence[Upload], rng: np.random.Generator,
              broadcast_rank: int = 0, aggregate: np.ndarray | None = None,
              broadcast: np.ndarray | None = None, start: np.ndarray | None = None,
              stored: np.ndarray | None = None, precision: np.ndarray | None = None) -> RoundResult:
        """One server step: aggregate, factorize, broadcast.

        The round's entry point validates once: each upload's operator for type, dtype and
        shape (O(1)), then the aggregate for finiteness and symmetry (one O(N^2) pass); only
        when that fails are the uploads checked one by one, to name the culprit. A NaN or
        inf in an upload reaches the aggregate; an asymmetric upload does too, unless
        another upload cancels its asymmetry exactly, in which case the aggregate the server
        factorizes is symmetric and valid. Uploads with weight 0 do not enter the aggregate
        and are checked on their own.

        Parameters
        ----------
        uploads : sequence of Upload
            This round's uploads (at least one).
        rng : numpy.random.Generator
        broadcast_rank : int
            Rank of the previous broadcast (sizes the per-upload fits of ``k_rule="fit"``).
        aggregate : numpy.ndarray or None
            The weighted sum of the operators, already accumulated as the uploads arrived
            (:meth:`accumulate`; the uploads may then carry no operator). Only with
            ``k_rule="scalars"``: nothing else needs the individual operators.
        broadcast : numpy.ndarray or None
            The previous broadcast (used by ``defense="support"``).
        start : numpy.ndarray or None
            (N, j) approximate leading eigenvectors of this round's aggregate -- the
            previous round's detected eigenvectors (``RoundResult.result.vectors``), which
            span the broadcast the clients blended in. They warm-start the block eigensolver
            (N >= 500): fewer products, the same result to the solver's tolerance
            (derived in {ref}`sec-cost-block`).
        stored, precision : numpy.ndarray or None
            The patterns the server stored last round ((S, N) int8, ``RoundResult.patterns``)
            and their precisions ((S,), ``RoundResult.precision``), both or neither. With
            ``acceptance="voted"`` a new pattern that refines a stored version within that
            version's precision takes its place (:func:`fedlam.refresh.merge_versions`);
            without them every accepted pattern stays. With ``defense="median"`` or
            ``"trimmed"`` an undecided round (no majority for the leading direction) keeps the
            stored patterns it did not re-find (``Server._majority_memory``). Other acceptances
            ignore them.
        """
        if isinstance(uploads, Upload) or not isinstance(uploads, Sequence) or len(uploads) == 0:
            raise TypeError(f"uploads must be a non-empty list of Upload, got {_describe(uploads)}")
        for c, u in enumerate(uploads):
            if not isinstance(u, Upload):
                raise TypeError(f"uploads[{c}] must be a fedlam.protocol.Upload, got {_describe(u)}")
        if (stored is None) != (precision is None):
            raise ValueError("stored and precision must be given together (the last round's RoundResult.patterns "
                             f"and .precision), got stored={_describe(stored)}, precision={_describe(precision)}")
        if stored is not None:
            refresh._check_memory(stored, precision)
        sizes = np.array([u.batch_size for u in uploads], dtype=np.float64)
        weights = self.weights(len(uploads), sizes)
        if self.defense is None and self.round_acceptance(uploads) == "fresh":
            if aggregate is not None:
                raise ValueError("acceptance='fresh' needs every upload's operator, not a pre-summed aggregate")
            # validated once: the mean of the uploads (fresh_aggregate names a culprit upload)
            ra = robust.fresh_aggregate(list(uploads), weights, broadcast=broadcast, start=start)
            return self._factorize_robust(ra, rng, weights, start, broadcast)
        defense = self._round_defense(uploads)
        if defense is not None:
            name, params = defense
            if aggregate is not None:
                raise ValueError(f"defense {name!r} (or acceptance='voted') needs every upload's operator, "
                                 "not a pre-summed aggregate")
            # the support test validates the mean once (robust._checked_mean); the median,
            # trimmed mean and Krum read every operator on its own: each is checked here, and
            # the operator the defence builds from them is not checked again
            if name != "support":
                for c, u in enumerate(uploads):
                    check_operator(u.operator, f"uploads[{c}].operator")
            if name in ("median", "trimmed"):
                weights = None          # unweighted estimators
            ra = robust.aggregate(list(uploads), weights, name, params, broadcast=broadcast,
                                  start=start if name == "support" else None, stored_patterns=stored)
            rr = self._factorize_robust(ra, rng, weights, start, broadcast)
            if params.get("groups") != robust.LEAVE_OUT:
                pats = self._refresh(uploads, broadcast, rr.patterns, rr.aggregate, weights, params, ra.products)
                rr = rr if pats is rr.patterns else replace(rr, patterns=pats)
                if name in ("median", "trimmed"):
                    return self._majority_memory(rr, ra, stored, precision)
                return rr
            return self._voted_memory(rr, uploads, broadcast, weights, params, ra.products, stored, precision)
        if aggregate is None:
            N = None
            for c, u in enumerate(uploads):
                check_operator_shape(u.operator, f"uploads[{c}].operator")
                assert u.operator is not None  # checked above
                if N is None:
                    N = u.operator.shape[0]
                elif u.operator.shape[0] != N:
                    raise ValueError(f"uploads[{c}].operator must be ({N}, {N}) like uploads[0], "
                                     f"got {u.operator.shape}")
            J = self.aggregate(uploads, weights)
            w_eff = weights if weights is not None else np.full(len(uploads), 1.0 / len(uploads))
            for c, u in enumerate(uploads):
                if w_eff[c] == 0.0:  # not in the aggregate: checked on its own
                    check_operator(u.operator, f"uploads[{c}].operator")
            try:
                check_operator(J, "aggregate")
            except ValueError:
                for c, u in enumerate(uploads):  # name the upload that made the aggregate invalid
                    check_operator(u.operator, f"uploads[{c}].operator")
                raise
        else:
            if self.k_rule != "scalars":
                raise ValueError(f"a pre-summed aggregate needs k_rule='scalars', got {self.k_rule!r}")
            J = check_operator(aggregate, "aggregate")
        if start is not None and (not isinstance(start, np.ndarray) or start.ndim != 2 or start.shape[0] != J.shape[0]):
            raise ValueError(f"start must be a float (N, j) array with N = {J.shape[0]}, got {_describe(start)}")
        seen = [u.without_operator() if (self.secure or u.operator is None) else u for u in uploads]
        extra = 0.0
        if self.client_privacy is not None:  # central variant: noise on the mean (distributed: none)
            J, extra = self.client_privacy.server_release(J, len(uploads), rng)
        result = self._factorize(J, rng, seen, weights, max(16, 2 * broadcast_rank + 8), start, extra)
        patterns = self._refresh(uploads, broadcast, np.asarray(result.patterns, dtype=np.int8), J, weights)
        return RoundResult(J, result, patterns, weights)

    def _voted_memory(self, rr: RoundResult, uploads: Sequence[Upload], broadcast: np.ndarray | None,
                      weights: np.ndarray | None, params: dict, products: robust.SpanProducts | None,
                      stored: np.ndarray | None, precision: np.ndarray | None) -> RoundResult:
        """The memory after a round with leave-out voters: the accepted patterns merged with the
        stored versions they refine (:func:`fedlam.refresh.merge_versions`, with ``stored`` and
        ``precision``), then refreshed where every voter agrees; each with its precision."""
        res = rr.result
        gamma = _predicted_overlaps(res)
        if gamma is None:            # the LAM search (search="lam") predicts no overlaps: no precision
            pats = self._refresh(uploads, broadcast, rr.patterns, rr.aggregate, weights, params, products)
            return rr if pats is rr.patterns else replace(rr, patterns=pats)
        pats = rr.patterns
        prec = lam.noise_flip_bound(pats.astype(np.float64), res.vectors, gamma)
        if stored is not None and precision is not None:
            pats, prec = refresh.merge_versions(pats, prec, stored, precision)
        new = self._refresh(uploads, broadcast, pats, rr.aggregate, weights, params, products)
        moved = np.flatnonzero(np.any(new != pats, axis=1))     # the refresh keeps the rows
        if moved.size:               # a refreshed pattern: every voter certain of its signs now
            prec = prec.copy()
            prec[moved] = np.minimum(prec[moved], lam.noise_flip_bound(new[moved].astype(np.float64),
                                                                        res.vectors, gamma))
        return replace(rr, patterns=new, precision=prec)

    def _majority_memory(self, rr: RoundResult, ra: robust.RobustAggregate, stored: np.ndarray | None,
                         precision: np.ndarray | None) -> RoundResult:
        """The memory after a median / trimmed-mean round: each accepted pattern with its precision
        (:func:`fedlam.lam.noise_flip_bound`), and, in an *undecided* round, the stored patterns kept.

        The majority count (:func:`fedlam.robust.majority_spike_count`) stops at the first leading
        direction of the operator that no majority of the uploads holds. When supported directions
        rank below it (``details["count_cut"]``: no honest majority among the answers, as with one
        attacker among the two clients that answered), the round cannot tell what the memory should
        hold. Writing the LAM's patterns alone would erase every stored pattern the cut hid, and
        the memory would be empty until the next round. So a stored pattern that no accepted
        pattern re-finds (``|overlap| >=`` the LAM's de-duplication threshold) stays, with its
        precision: nothing is written and nothing erased. Without ``stored`` (and
        ``precision``), or with a LAM search that predicts no overlaps, the round's patterns are
        the LAM's. Derived in {ref}`sec-robust-median`."""
        res = rr.result
        gamma = _predicted_overlaps(res)
        pats = rr.patterns
        K = pats.shape[0]
        if gamma is None and K:   # no predicted overlaps (search="lam"): no precision
            return rr
        prec = lam.noise_flip_bound(pats.astype(np.float64), res.vectors, gamma) if gamma is not None else np.zeros(0)
        if stored is not None and precision is not None and stored.shape[0] and ra.details.get("count_cut"):
            pr = refresh._check_memory(stored, precision, pats.shape[1])
            # the round's patterns first: a stored pattern they re-find is their duplicate
            both = np.vstack([pats, stored.astype(np.int8)])
            order = np.concatenate([np.ones(K), np.zeros(stored.shape[0])])
            kept = lam.deduplicate(both, order, lam._make_params(None, self.lam_params).dedup_threshold)
            old = np.sort(kept[kept >= K]) - K
            pats = np.vstack([pats, stored[old].astype(np.int8)])
            prec = np.concatenate([prec, pr[old]])
        return replace(rr, patterns=pats, precision=prec)

    def _round_defense(self, uploads: Sequence[Upload]) -> tuple[str, dict[str, Any]] | None:
        """The defence this round runs and its parameters: the server's, or, for
        ``acceptance="voted"``, the support test with leave-one-out voters (``s`` at most the
        number of answers); None for the plain mean."""
        if self.defense is not None:
            return self.defense, self.defense_params
        if self.round_acceptance(uploads) == "voted":
            return "support", _voted_params(len(uploads))
        return None

    def _refresh(self, uploads: Sequence[Upload], broadcast: np.ndarray | None, patterns: np.ndarray,
                 J: np.ndarray, weights: np.ndarray | None, defense_params: dict | None = None,
                 products: robust.SpanProducts | None = None) -> np.ndarray:
        """The stored patterns after this round's refresh (:mod:`fedlam.refresh`), or ``patterns``
        itself where the server does not refresh: ``acceptance="refresh"`` reads the fresh part of
        the mean ``J``; ``acceptance="voted"`` and the support defence with leave-out voters ask
        every voter to agree (:func:`fedlam.refresh.refresh_voted`; ``defense_params``: the support
        test's parameters of this round, :meth:`_round_defense`). An empty memory (no broadcast,
        or the zero broadcast of ``control_round0``) has no echo to see past."""
        voted = defense_params is not None and defense_params.get("groups") == robust.LEAVE_OUT
        # (a defence never runs the "refresh" acceptance: the constructor refuses the pair)
        if broadcast is None or not (voted or self.round_acceptance(uploads) == "refresh"):
            return patterns
        check_operator_shape(broadcast, "broadcast")
        if not broadcast.any():
            return patterns
        if defense_params is not None and voted:
            voters = robust.voting_groups(len(uploads), robust.LEAVE_OUT, defense_params["s"])
            return refresh.refresh_voted(uploads, broadcast, patterns, voters, weights=weights, products=products)[0]
        return refresh.refresh_patterns(J, broadcast, patterns, refresh.echo_weight(uploads, weights))[0]

    def _factorize_robust(self, ra: robust.RobustAggregate, rng: np.random.Generator,
                          weights: np.ndarray | None, start: np.ndarray | None = None,
                          broadcast: np.ndarray | None = None) -> RoundResult:
        """Factorize a cleaned aggregate with the bulk its defence derived (the defence checked
        the uploads it was built from: no second operator check). ``broadcast``, the memory the
        server sent, lets a stored archetype pass while the fresh evidence corrects a few of its
        bits (:func:`fedlam.lam._factorize`'s ``memory``)."""
        params = dict(self.lam_params)
        if "k_method" not in params:
            params["k_method"] = "free"
            params["components"] = ra.components or [khat.Component(0.0, 1.0)]
            params["noise_sigma"] = math.sqrt(ra.noise_var / ra.operator.shape[0])
        params["start"] = start
        if lam._make_params(None, self.lam_params).search == "span":
            params["memory"] = broadcast
        if ra.max_k is not None:
            params["max_k"] = ra.max_k
        # the defence computed ra.spectrum from ra.operator: no second check
        result = lam._factorize(ra.operator, rng=rng, spectrum=ra.spectrum, spectrum_checked=True, **params)
        patterns = np.asarray(result.patterns, dtype=np.int8)
        return RoundResult(ra.operator, result, patterns, weights)

    def accumulate(self, total: np.ndarray | None, upload: Upload, weight: float) -> np.ndarray:
        """Add ``weight * upload.operator`` to a running sum (checked on arrival).

        With this the server never holds more than one received operator at a time: the
        memory of a round does not grow with the number of clients (1000 uploads at N = 784
        would be 4.9 GB). Returns the new sum.
        """
        if not isinstance(upload, Upload):
            raise TypeError(f"upload must be a fedlam.protocol.Upload, got {_describe(upload)}")
        op = self._clip(check_operator(upload.operator, "upload.operator"))
        if total is None:
            return np.multiply(op, float(weight), dtype=np.float64)
        if op.shape != total.shape:
            raise ValueError(f"upload.operator must have shape {total.shape}, got {op.shape}")
        if weight != 0.0:
            total += float(weight) * op
        return total

    @staticmethod
    def broadcast(patterns: np.ndarray) -> np.ndarray:
        """Broadcast operator ``xî^T xî / N`` (zero for K̂ = 0)."""
        return operators.pattern_operator(patterns)


@dataclass
class History:
    """Per-round record of a federation (row t = after the server step of round t).

    Attributes
    ----------
    k_hat : numpy.ndarray
        (T,) int, spectral estimate K̂ of the server.
    n_patterns : numpy.ndarray
        (T,) int, number of accepted (broadcast) patterns.
    patterns : list of numpy.ndarray
        Accepted patterns per round, int8 (K̂_t, N).
    magnetization, magnetization_max : numpy.ndarray
        (T, K) with optimal one-to-one matching / the paper's max overlap.
    spurious : numpy.ndarray
        (T,) int, accepted patterns matching no archetype.
    weights : numpy.ndarray
        (T, L) weights used (1 at round 0; NaN for poison clients).
    weights_raw : numpy.ndarray
        (T, L) instantaneous rule values before smoothing (NaN where undefined).
    r_used : numpy.ndarray
        (T, L) quality used by the controller (NaN where none).
    novelty : numpy.ndarray
        (T, L) novelty fraction f of the novelty rule (NaN otherwise).
    top_eigenvalues : numpy.ndarray
        (T, n_top) leading eigenvalues of the server aggregate J_s (NaN-padded). Where the
        server's block solver computed them against its K̂ threshold (the default free-edge
        rule, N >= 500), the values below that threshold are lower bounds placed below it,
        several Tracy-Widom scales low (see the book's section on the block eigensolver).
        Under that threshold the server computes 8 values (32, 128, ... while K̂ >= 7,
        :func:`fedlam.cost.server_top_k`); columns beyond those it computed are NaN.
    spectral_gap : numpy.ndarray
        (T,) relative gap of the aggregate after its K̂-th eigenvalue (NaN when K̂ = 0); the
        value after the K̂-th is such a lower bound.
    frobenius_error : numpy.ndarray
        (T,) ``||Ĵ_s - J*||_F / ||J*||_F`` with ``J* = pattern_operator(archetypes)``.
    exposure : numpy.ndarray
        (T, K) federated exposure over clients whose data come from archetypes.
    coverage : numpy.ndarray
        (T, K) bool coverage.
    kinds : tuple of str
        Client kinds.
    controller : str
        Controller name.
    params : dict
        The run's options.
    asked, answered : list of tuple of int
        Per round, the clients the server asked and those whose upload it used (everyone with
        full participation). A round with fewer answers than ``participation.min_clients`` is
        skipped: ``k_hat`` is -1 and the memory (patterns, metrics) stays that of the round
        before.
    """

    k_hat: np.ndarray
    n_patterns: np.ndarray
    patterns: list
    magnetization: np.ndarray
    magnetization_max: np.ndarray
    spurious: np.ndarray
    weights: np.ndarray
    weights_raw: np.ndarray
    r_used: np.ndarray
    novelty: np.ndarray
    top_eigenvalues: np.ndarray
    spectral_gap: np.ndarray
    frobenius_error: np.ndarray
    exposure: np.ndarray
    coverage: np.ndarray
    kinds: tuple = ()
    controller: str = ""
    params: dict = field(default_factory=dict)
    asked: list = field(default_factory=list)
    answered: list = field(default_factory=list)

    @property
    def T(self) -> int:
        """Number of rounds."""
        return int(self.k_hat.shape[0])


def _server_values(result: Any, J: np.ndarray) -> np.ndarray:
    """Eigenvalues of the server aggregate, descending (from the factorization if it kept them)."""
    vals = getattr(result, "values", None)
    if vals is None:
        vals = getattr(result, "spectrum", None)
        vals = getattr(vals, "values", vals)
    if vals is None:
        vals = spectral.spectrum(J).values
    return np.sort(np.asarray(vals, dtype=np.float64))[::-1]


class _Recorder:
    """Collects the per-round metrics of :func:`run_federation` (keeps the round loop short)."""

    def __init__(self, archetypes: np.ndarray, T: int, L: int, n_top: int) -> None:
        K = archetypes.shape[0]
        self.archetypes = archetypes
        self.J_star = operators.pattern_operator(archetypes)
        self.n_top = n_top
        names = ("weights", "weights_raw", "r_used", "novelty")
        self.per_client = {n: np.full((T, L), np.nan) for n in names}
        self.k_hat = np.zeros(T, dtype=np.int64)
        self.n_patterns = np.zeros(T, dtype=np.int64)
        self.magnetization = np.zeros((T, K))
        self.magnetization_max = np.zeros((T, K))
        self.spurious = np.zeros(T, dtype=np.int64)
        self.top = np.full((T, n_top), np.nan)
        self.gap = np.full(T, np.nan)
        self.fro = np.zeros(T)
        self.exposure = np.zeros((T, K))
        self.patterns: list[np.ndarray] = []
        self.asked: list[tuple] = []
        self.answered: list[tuple] = []

    def skipped(self, t: int) -> None:
        """A round the server skipped (too few answers): K-hat -1, the memory unchanged."""
        N = self.archetypes.shape[1]
        self.k_hat[t] = -1
        if t == 0:
            self.patterns.append(np.empty((0, N), dtype=np.int8))
            self.fro[t] = 1.0
            return
        self.patterns.append(self.patterns[-1])
        for a in (self.n_patterns, self.magnetization, self.magnetization_max, self.spurious, self.fro,
                  self.exposure):
            a[t] = a[t - 1]

    def client(self, t: int, c: int, client: Client, w: float, controlled: bool) -> None:
        self.per_client["weights"][t, c] = w
        last = client.controller.last if controlled and client.kind != "poison" else None
        if last is not None:
            self.per_client["weights_raw"][t, c] = last.w_raw
            self.per_client["r_used"][t, c] = last.r_used
            self.per_client["novelty"][t, c] = last.details.get("novelty", np.nan)

    def server(self, t: int, rr: RoundResult, clients: Sequence[Client]) -> None:
        xi = self.archetypes
        K = xi.shape[0]
        pats = rr.patterns
        self.patterns.append(pats)
        self.k_hat[t] = int(rr.result.k_hat)
        self.n_patterns[t] = pats.shape[0]
        self.magnetization[t] = metrics.magnetization(pats, xi)
        self.magnetization_max[t] = metrics.magnetization_max(pats, xi)
        self.spurious[t] = metrics.spurious_count(pats, xi)
        vals = _server_values(rr.result, rr.aggregate)
        self.top[t, : min(self.n_top, vals.size)] = vals[: self.n_top]
        if 0 < self.k_hat[t] < vals.size:
            self.gap[t] = spectral.spectral_gap(vals, int(self.k_hat[t]))
        self.fro[t] = metrics.frobenius_error(rr.broadcast, self.J_star)
        # exposure over the clients whose examples come from archetypes (label counts only)
        labels = [np.repeat(np.arange(K), cl.label_counts(K)) for cl in clients
                  if cl.kind in ("honest", "flip")]
        self.exposure[t] = data.exposure(labels, K) if labels else np.zeros(K)

    def history(self, kinds: tuple, controller: str, params: dict) -> History:
        pc = self.per_client
        return History(
            k_hat=self.k_hat, n_patterns=self.n_patterns, patterns=self.patterns,
            magnetization=self.magnetization, magnetization_max=self.magnetization_max,
            spurious=self.spurious, weights=pc["weights"], weights_raw=pc["weights_raw"],
            r_used=pc["r_used"], novelty=pc["novelty"], top_eigenvalues=self.top,
            spectral_gap=self.gap, frobenius_error=self.fro, exposure=self.exposure,
            coverage=data.coverage(self.exposure), kinds=kinds, controller=controller,
            params=params, asked=self.asked, answered=self.answered,
        )


def run_federation(
    archetypes: np.ndarray,
    specs: Sequence[ClientSpec],
    T: int,
    rng: np.random.Generator | int,
    controller: str | float = "paper",
    *,
    ema_alpha: float = 0.5,
    w_init: float = 1.0,
    known_r: bool = False,
    controller_params: dict | None = None,
    lam_params: dict | None = None,
    aggregation: str | np.ndarray = "equal",
    n_top: int = 10,
    control_round0: bool = False,
    reconstruct: Callable[[Any], np.ndarray] | None = None,
    k_rule: str = "scalars",
    secure: bool = False,
    privacy: PrivacyMechanism | None = None,
    participation: Any = None,
    defense: str | None = None,
    defense_params: dict | None = None,
    acceptance: str | None = None,
) -> History:
    """Run T rounds of the federated protocol and record everything per round.

    Derived in {ref}`sec-protocol`; the controllers in {ref}`sec-controller` and
    {ref}`sec-controller-rule`.

    Parameters
    ----------
    archetypes : numpy.ndarray
        (K, N) +-1 ground truth (the clients' data source and the metrics' reference).
    specs : sequence of ClientSpec
        One per client (L >= 1).
    T : int
        Number of rounds (>= 1).
    rng : numpy.random.Generator or int
        Seed; each client and the server get an independent child stream.
    controller : {"paper", "novelty"} or float
        Weight rule of every client (a float = constant weight).
    ema_alpha, w_init : float
        EMA coefficient and initial weight of the controllers.
    known_r : bool
        True: controllers use the client's spec ``r``; False (default): clients estimate
        it from their own spectrum (clients do not know r in practice).
    controller_params : dict, optional
        Extra controller options (``w_floor``, ``r_min``, ``tw_quantile``).
    lam_params : dict, optional
        Options of :func:`fedlam.lam.factorize` (validated before round 0). Without
        ``k_method`` the server counts against the free-convolution edge of the uploads'
        bulks (``k_rule``, :class:`Server`); ``{"k_method": "mp"}`` restores the single
        Marchenko-Pastur rule on the aggregate.
    aggregation : {"equal", "batch"} or numpy.ndarray
        Server aggregation (see :class:`Server`).
    n_top : int
        Number of leading server eigenvalues recorded (NaN beyond those the server computed,
        see :class:`History`).
    control_round0 : bool
        False (default, the paper): round 0 uploads local operators with ``w = 1``.
        True: round 0 runs the controllers against the zero broadcast (nothing in memory),
        so a rule that rejects noise can keep a noise client out of round 0 as well
        (with ``A = 0`` both rules give honest clients ``w = 1``, as in the paper).
    reconstruct : callable, optional
        Replaces the LAM stage for baselines: ``reconstruct(result) -> patterns`` receives
        the round's :class:`fedlam.lam.FactorizeResult` (spectrum, K-hat, detected
        eigenvectors) and returns the (K', N) +-1 patterns to broadcast. Everything else
        (clients, streams, aggregation, K-hat) is unchanged, so a comparison isolates the
        reconstruction step. Default: the factorization's accepted patterns.
    k_rule : {"scalars", "fit"}
        The server's K-hat edge (see :class:`Server`).
    secure : bool
        Secure aggregation: the server sees only the sum of the uploads and their scalars.
    privacy : PrivacyMechanism or None
        Example-level (:class:`fedlam.privacy.GaussianMechanism`): applied by every client to its
        fresh operator before the weight is computed; the server's K-hat edge accounts for the
        reported noise. Client-level (:class:`fedlam.privacy.ClientLevelMechanism`): every client
        clips its whole upload (and adds its noise share, distributed variant), the server adds
        the central noise to the equal mean; needs a constant weight, equal aggregation, no
        defence and at least ``min_clients`` reports per round (refused otherwise).
    participation : fedlam.participation.Participation or None
        Partial participation and failures (the model of the Flower deployment, chapter 13):
        each round the server asks a sample of the available clients; those asked draw their
        batch and upload, some drop out; the round proceeds with the answers in client order
        (a fixed ``aggregation`` vector is renormalised over them) or, with fewer than
        ``min_clients``, is skipped. The sampling uses its own stream,
        ``default_rng(seed).spawn(L + 2)[L + 1]``, as the Flower server does. None: everyone,
        every round.
    defense, defense_params
        Server defence (:class:`Server`, :mod:`fedlam.robust`).
    acceptance : {"fresh", "paper", "refresh", "voted"} or None
        How the server admits patterns into its memory (:class:`Server`; None, the default:
        ``"fresh"`` wherever the server sees every upload and runs no median/trimmed defence,
        ``"voted"`` under example-level ``privacy`` without a defence (``"refresh"`` if also
        ``secure``), :func:`default_acceptance`).
        ``"paper"`` stores whatever the factorization of the
        aggregate accepts; ``"fresh"`` admits only directions that the fresh parts of at least
        two of the round's uploads certify (all answering uploads if fewer; see
        :func:`fedlam.robust.fresh_aggregate`) and keeps what is stored, so one poisoner or a
        near-copy of an archetype cannot write into the memory, at the price of admitting a new
        archetype only once two clients see it; ``"refresh"`` is ``"paper"`` with every stored
        pattern rewritten from the fresh part of the mean where its sign is certain
        (:mod:`fedlam.refresh`).

    Returns
    -------
    History
    """
    check_pm1(archetypes, "archetypes", ndim=2)
    K, N = archetypes.shape
    if N < 2:
        raise ValueError(f"archetypes must have N >= 2 columns, got shape {archetypes.shape}")
    T = check_positive_int(T, "T")
    n_top = check_positive_int(n_top, "n_top")
    if n_top > N:
        raise ValueError(f"n_top must be <= N = {N}, got {n_top}")
    if T > MAX_ROUNDS:
        raise ValueError(f"T must be <= {MAX_ROUNDS}, got {T}")
    if isinstance(specs, ClientSpec) or not isinstance(specs, Sequence) or len(specs) == 0:
        raise TypeError(f"specs must be a non-empty list of ClientSpec, got {_describe(specs)}")
    for c, s in enumerate(specs):
        if not isinstance(s, ClientSpec):
            raise TypeError(f"specs[{c}] must be a ClientSpec, got {_describe(s)}")
    if not isinstance(known_r, bool):
        raise TypeError(f"known_r must be a bool, got {_describe(known_r)}")
    if not isinstance(control_round0, bool):
        raise TypeError(f"control_round0 must be a bool, got {_describe(control_round0)}")
    if not (isinstance(controller, str) or isinstance(controller, numbers.Real)):
        raise TypeError(f"controller must be 'paper', 'novelty' or a float, got {_describe(controller)}")
    ema_alpha = check_in_range(ema_alpha, "ema_alpha", 0.0, 1.0)
    w_init = check_in_range(w_init, "w_init", 0.0, 1.0)
    if reconstruct is not None and not callable(reconstruct):
        raise TypeError(f"reconstruct must be callable or None, got {_describe(reconstruct)}")
    if controller_params is not None and not isinstance(controller_params, dict):
        raise TypeError(f"controller_params must be a dict, got {_describe(controller_params)}")
    if controller_params and isinstance(controller, numbers.Real):
        raise ValueError(f"controller_params must be empty for a constant controller ({controller!r}), "
                         f"got {sorted(controller_params)}")
    if privacy is not None and not callable(getattr(privacy, "apply", None)):
        raise TypeError(f"privacy must have an apply(operator, batch_size, rng) method, got {_describe(privacy)}")
    client_dp = privacy if getattr(privacy, "level", None) == "client" else None
    if client_dp is not None and not isinstance(controller, numbers.Real):
        raise ValueError(f"client-level DP covers the operators, but an adaptive weight rule ({controller!r}) sends "
                         "a data-dependent weight in clear with every upload; use a constant weight "
                         "(e.g. controller=1.0) with privacy.ClientLevelMechanism")
    from . import participation as _part

    if participation is not None and not isinstance(participation, _part.Participation):
        raise TypeError(f"participation must be a fedlam.participation.Participation or None, "
                        f"got {_describe(participation)}")
    part = _part.FULL if participation is None else participation
    part.check_clients(len(specs))
    gen = as_rng(rng)
    L = len(specs)
    streams = gen.spawn(L + 1)
    rng_part = gen.spawn(1)[0]
    cp = dict(controller_params or {})
    robust.check_defense(defense, defense_params, L)   # s <= L etc., before any work
    if client_dp is not None and (part.min_clients if participation is not None else L) < client_dp.min_clients:
        raise ValueError(f"client-level DP needs min_clients = {client_dp.min_clients} reports per round; "
                         f"the federation can proceed with {part.min_clients if participation is not None else L}")
    if acceptance is None:
        acceptance = default_acceptance(secure=secure, defense=defense, client_privacy=client_dp,
                                        privacy=None if client_dp is not None else privacy)
    server = Server(aggregation, lam_params, k_rule=k_rule, secure=secure, defense=defense,
                    defense_params=defense_params, client_privacy=client_dp, acceptance=acceptance)
    if isinstance(aggregation, np.ndarray):
        check_prob_vector(aggregation, "aggregation", size=L)
    clients = [
        Client(s.make_source(archetypes, T),
               ctl.make_controller(controller, r=s.r if known_r else None, alpha=ema_alpha,
                                   w_init=w_init, **({} if isinstance(controller, numbers.Real) else cp)),
               streams[c], kind=s.kind, r=s.r if known_r and s.kind != "noise" else None,
               privacy=privacy, N=N, behaviour=s.behaviour)
        for c, s in enumerate(specs)
    ]
    rec = _Recorder(archetypes, T, L, n_top)

    # round 0: no feedback (None), or an empty memory the controllers can judge against
    broadcast = np.zeros((N, N)) if control_round0 else None
    k_broadcast = 0
    start = None  # the last round's detected eigenvectors: they warm-start the next spectrum
    memory: RoundResult | None = None     # the last round's stored patterns (and their precision)
    # sum the uploads as they arrive: O(N^2) memory (a defence needs every upload)
    stream = server.k_rule == "scalars" and not server.needs_uploads
    for t in range(T):
        sample = part.sample_round(t, part.available(t, L), rng_part)
        rec.asked.append(sample.asked)
        rec.answered.append(sample.answered if sample.proceed else ())
        ups: dict[int, Upload] = {}
        for c in sample.asked:
            clients[c].observe(t)
            ups[c] = clients[c].upload(broadcast)
        if not sample.proceed:
            rec.skipped(t)
            continue
        ids = list(sample.answered)
        sizes = np.array([clients[c].batch_size for c in ids], dtype=np.float64)
        if isinstance(aggregation, np.ndarray) and len(ids) < L:
            sub = aggregation[ids].astype(np.float64)
            om = sub / sub.sum() if sub.sum() > 0 else None
            server_t = Server(om if om is not None else "equal", lam_params, k_rule=k_rule, secure=secure,
                              defense=defense, defense_params=defense_params, client_privacy=client_dp,
                              acceptance=acceptance)
        else:
            server_t = server
        om = server_t.weights(len(ids), sizes)
        uploads = []
        total = None
        for j, c in enumerate(ids):
            up = ups[c]
            rec.client(t, c, clients[c], up.weight, controlled=broadcast is not None)
            if stream:
                total = server_t.accumulate(total, up, 1.0 / len(ids) if om is None else float(om[j]))
                up = up.without_operator()
            uploads.append(up)
        # a defence removes the broadcast it sent from every upload (the clients' fresh evidence)
        kw = {"broadcast": broadcast} if server.needs_broadcast else {}
        if memory is not None and memory.precision is not None:   # the stored patterns' precision
            kw.update(stored=memory.patterns, precision=memory.precision)
        rr = server_t.round(uploads, streams[L], broadcast_rank=k_broadcast, aggregate=total, start=start, **kw)
        start = rr.warm_start
        if reconstruct is not None:
            patterns = reconstruct(rr.result)
            if not isinstance(patterns, np.ndarray):
                raise TypeError(f"reconstruct(result) must return a numpy array, got {_describe(patterns)}")
            check_pm1(patterns, "reconstruct(result)", ndim=2, allow_empty=True)
            if patterns.shape[1:] != (N,):
                raise ValueError(f"reconstruct(result) must return (K', {N}) patterns, got shape {patterns.shape}")
            patterns = patterns.astype(np.int8)
            rr = RoundResult(rr.aggregate, rr.result, patterns, rr.weights)
        k_broadcast = rr.patterns.shape[0]
        broadcast = rr.broadcast
        memory = rr
        rec.server(t, rr, clients)

    params = {"ema_alpha": ema_alpha, "w_init": w_init, "known_r": known_r,
              "controller_params": cp, "lam_params": dict(lam_params or {}),
              "k_rule": k_rule, "secure": secure, "privacy": privacy is not None,
              "participation": None if participation is None else participation.to_dict(),
              "aggregation": aggregation if isinstance(aggregation, str) else "fixed",
              "control_round0": control_round0, "N": N, "K": K, "L": L, "T": T}
    return rec.history(tuple(s.kind for s in specs), str(controller), params)
