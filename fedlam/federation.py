r"""The federation: clients that keep their examples, a server, and the round loop.

The round structure follows the paper (Section "Main model architecture" and
Algorithm ``Fede_algo``) exactly. Derived in {ref}`sec-protocol`.

* Round 0: every client draws its first batch and uploads its local Hebbian operator
  ``J_c^(0) = eta^T eta / (N M)`` (no feedback yet, ``w_c(0) = 1``).
* Round t >= 1: every client draws a new batch, computes its operator ``B``, chooses
  ``w_c(t)`` with its controller from ``B`` and the broadcast ``A = Ĵ_s^(t-1)``, and
  uploads ``w_c(t) B + (1 - w_c(t)) A`` (paper eq. ``convex_comb``).
* Every round the server averages the uploads (equal mean, paper eq. ``server_agg``, or
  weighted), factorizes the mean with :func:`fedlam.lam.factorize`, and broadcasts
  ``Ĵ_s^(t) = xî^T xî / N`` (:func:`fedlam.operators.pattern_operator`; the zero matrix when
  nothing is accepted).

Client kinds (:class:`ClientSpec`): ``"honest"``; ``"noise"`` -- the paper's attacker, a
client following the protocol whose examples are uniform +-1 (r = 0); ``"poison"`` --
uploads ``pattern_operator`` of a fake +-1 pattern it holds, every round, ignoring the
protocol; ``"flip"`` -- follows the protocol on honest data and uploads the negated
operator.

Edge cases: a client with an empty batch (M = 0) uploads the broadcast (zero at round 0)
with weight 0; K̂ = 0 broadcasts the zero operator, which every controller handles.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from . import controller as ctl
from . import data, khat, lam, metrics, operators, spectral
from ._validation import (
    _describe,
    as_rng,
    check_choice,
    check_in_range,
    check_nonneg_int,
    check_pm1,
    check_positive_int,
    check_prob_vector,
    check_quality,
)

__all__ = ["CLIENT_KINDS", "ClientSpec", "Client", "Server", "History", "run_federation"]

CLIENT_KINDS = ("honest", "noise", "poison", "flip")


@dataclass(frozen=True)
class ClientSpec:
    """What one client sees and how it behaves.

    Attributes
    ----------
    r : float or None
        Channel quality in (0, 1] of its examples (honest / flip; required for them). It is
        also the "known r" the controller may use; for a noise client it is only that
        (None: the client estimates it).
    M : int or numpy.ndarray
        Batch size per round: an int, or a (T,) int array (0 = empty batch).
    mixture : numpy.ndarray or None
        (T, K) class mixture of this client (its row of a (T, L, K) schedule); required
        for honest / flip clients, ignored otherwise.
    kind : {"honest", "noise", "poison", "flip"}
        Behaviour (see the module notes).

    Derived in {ref}`sec-protocol`.
    """

    r: float | None = None
    M: int | np.ndarray = 300
    mixture: np.ndarray | None = None
    kind: str = "honest"

    def __post_init__(self) -> None:
        check_choice(self.kind, "kind", CLIENT_KINDS)
        if self.r is not None:
            check_quality(self.r)
        elif self.kind in ("honest", "flip"):
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
        """The (T, K) mixture after validation (None for noise / poison clients)."""
        if self.kind in ("noise", "poison"):
            return None
        mix = self.mixture
        if not isinstance(mix, np.ndarray) or mix.shape != (T, K):
            raise ValueError(f"mixture must be a (T, K) = ({T}, {K}) array, got {_describe(mix)}")
        for t in range(T):
            check_prob_vector(mix[t], f"mixture[{t}]", size=K)
        return mix.astype(np.float64)


class Client:
    """One federated client. Its examples never leave it.

    The examples, labels and generator are private (name-mangled attributes). Public
    surface: :meth:`observe` (draw the round's batch), :meth:`upload` (the operator sent to
    the server and the weight used), :attr:`batch_size`, and, for metrics only,
    :meth:`label_counts`. Derived in {ref}`sec-protocol`.

    Parameters
    ----------
    spec : ClientSpec
    archetypes : numpy.ndarray
        (K, N) +-1; the client's data source (the world, not knowledge of the client).
    T : int
        Number of rounds.
    controller : fedlam.controller.WeightController
        Its plasticity controller (ignored by poison clients).
    rng : numpy.random.Generator or int
    """

    def __init__(self, spec: ClientSpec, archetypes: np.ndarray, T: int,
                 controller: ctl.WeightController, rng: np.random.Generator | int) -> None:
        if not isinstance(spec, ClientSpec):
            raise TypeError(f"spec must be a ClientSpec, got {_describe(spec)}")
        if not isinstance(controller, ctl.WeightController):
            raise TypeError(f"controller must be a WeightController, got {_describe(controller)}")
        check_pm1(archetypes, "archetypes", ndim=2)
        self.kind = spec.kind
        self.controller = controller
        self.K, self.N = archetypes.shape
        self.__archetypes = archetypes
        self.__r = spec.r
        self.__sizes = spec.batch_sizes(T)
        self.__mixture = spec.checked_mixture(T, self.K)
        self.__rng = as_rng(rng)
        self.__examples = np.empty((0, self.N), dtype=np.int8)
        self.__labels = np.empty(0, dtype=np.int64)
        self.__fake = None
        if self.kind == "poison":
            self.__fake = self.__rng.choice(np.array([-1, 1], dtype=np.int8), size=(1, self.N))

    @property
    def batch_size(self) -> int:
        """Size of the current batch."""
        return int(self.__examples.shape[0])

    def observe(self, t: int) -> None:
        """Draw the private batch of round ``t``."""
        M = int(self.__sizes[t])
        if self.kind in ("honest", "flip"):
            self.__examples, self.__labels = data.sample_examples(
                self.__archetypes, M, self.__r, self.__mixture[t], self.__rng)
        elif self.kind == "noise":
            self.__examples = self.__rng.choice(np.array([-1, 1], dtype=np.int8), size=(M, self.N))
            self.__labels = np.empty(0, dtype=np.int64)
        else:  # poison: holds no examples
            self.__examples = np.empty((0, self.N), dtype=np.int8)
            self.__labels = np.empty(0, dtype=np.int64)

    def label_counts(self) -> np.ndarray:
        """(K,) archetype counts of the current batch (metrics only; zeros for noise/poison)."""
        return np.bincount(self.__labels, minlength=self.K).astype(np.int64)

    def upload(self, broadcast: np.ndarray | None) -> tuple[np.ndarray, float]:
        """The operator sent to the server and the weight used.

        Parameters
        ----------
        broadcast : numpy.ndarray or None
            The server's last broadcast ``A``; ``None`` at round 0 of the paper's protocol
            (local operators only, ``w = 1``). A zero matrix instead runs the controller
            against the empty memory.

        Returns
        -------
        (operator, w) : (numpy.ndarray, float)
            ``w`` is NaN for a poison client (it does not blend).
        """
        if self.kind == "poison":
            return operators.pattern_operator(self.__fake), float("nan")
        M = self.batch_size
        B = operators.hebbian(self.__examples) if M > 0 else None
        if broadcast is None:  # round 0
            op, w = (B, 1.0) if B is not None else (np.zeros((self.N, self.N)), 0.0)
        else:
            spec = None
            if B is not None and self.controller.needs_spectrum:
                spec = ctl.local_spectrum(self.__examples)
            w = self.controller.update(broadcast, B, M, spec)
            op = operators.blend(B, broadcast, w) if B is not None else broadcast.copy()
        return (-op if self.kind == "flip" else op), w


class Server:
    """The server: aggregates uploads, factorizes, broadcasts. Derived in {ref}`sec-protocol`.

    K-hat of the aggregate: with more than one client the uploads have different noise
    levels (an honest client at r = 0.9 has bulk variance 0.19, a noise client 1, a client
    that uploads the broadcast none), so the bulk of the mean is the free convolution of
    their bulks, whose edge lies above the Marchenko-Pastur edge fitted to the mean; the
    server therefore uses ``k_method="free"`` (:func:`fedlam.spectral.k_hat_free`) on the
    received operators unless ``lam_params`` sets ``k_method`` explicitly (e.g. ``"mp"``,
    the single-MP rule, which over-counts such mixtures). Derived in {ref}`sec-bbp-threshold`.

    Parameters
    ----------
    aggregation : {"equal", "batch"} or numpy.ndarray
        ``"equal"``: mean over clients (the paper); ``"batch"``: weights proportional to the
        clients' batch sizes this round (equal if all are empty); or a fixed (L,) probability
        vector.
    lam_params : dict, optional
        Keyword parameters of :func:`fedlam.lam.factorize` (``k_method`` included; when it
        is absent, ``"free"`` for L > 1 clients and the LAM default ``"mp"`` for one).
    """

    def __init__(self, aggregation: str | np.ndarray = "equal", lam_params: dict | None = None) -> None:
        if isinstance(aggregation, str):
            check_choice(aggregation, "aggregation", ("equal", "batch"))
        elif not isinstance(aggregation, np.ndarray):
            raise TypeError(
                f"aggregation must be 'equal', 'batch' or an (L,) array, got {_describe(aggregation)}"
            )
        if lam_params is not None and not isinstance(lam_params, dict):
            raise TypeError(f"lam_params must be a dict, got {_describe(lam_params)}")
        self.aggregation = aggregation
        self.lam_params = dict(lam_params or {})

    def weights(self, L: int, batch_sizes: np.ndarray | None = None) -> np.ndarray | None:
        """Aggregation weights (L,) of this round; None for the equal mean."""
        if isinstance(self.aggregation, np.ndarray):
            return check_prob_vector(self.aggregation, "aggregation", size=L)
        if self.aggregation == "batch" and batch_sizes is not None and batch_sizes.sum() > 0:
            return batch_sizes / batch_sizes.sum()
        return None

    def aggregate(self, uploads: Sequence[np.ndarray], batch_sizes: np.ndarray | None = None) -> np.ndarray:
        """Mean (or weighted mean) of the uploaded operators."""
        return operators.aggregate(list(uploads), self.weights(len(uploads), batch_sizes))

    def k_method(self, L: int) -> str:
        """K-hat estimator used with L clients: ``lam_params["k_method"]`` if set, else
        ``"free"`` for L > 1 and the LAM default for L = 1."""
        if "k_method" in self.lam_params:
            return self.lam_params["k_method"]
        return "free" if L > 1 else lam.LAMParams().k_method

    def factorize(self, J: np.ndarray, rng: np.random.Generator,
                  uploads: Sequence[np.ndarray] | None = None,
                  weights: np.ndarray | None = None, component_k: int = 16) -> Any:
        """Run :func:`fedlam.lam.factorize` on the aggregate.

        Parameters
        ----------
        J : numpy.ndarray
            The aggregate ``sum_c w_c U_c``.
        rng : numpy.random.Generator
        uploads : sequence of numpy.ndarray, optional
            The received operators ``U_c``: with ``k_method="free"`` their bulks are fitted
            (top ``component_k`` eigenvalues each, block Krylov, plus exact traces) and set the
            edge. Without them J is treated as a single component.
        weights : numpy.ndarray, optional
            ``w_c`` (None: equal).
        component_k : int
            Leading eigenvalues per upload; take ``>= 2 K_b + 8`` with ``K_b`` the rank of
            the last broadcast (it is blended into every honest upload).
        """
        params = dict(self.lam_params)
        L = len(uploads) if uploads is not None else 1
        params["k_method"] = self.k_method(L)
        if params["k_method"] == "free" and uploads is not None:
            comps = [khat._fit_operator(U, component_k) for U in uploads]
            return lam.factorize(J, rng=rng, components=comps,
                                 component_weights=weights if weights is not None else np.full(L, 1.0 / L),
                                 **params)
        return lam.factorize(J, rng=rng, **params)

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
        (T, n_top) leading eigenvalues of the server aggregate J_s (NaN-padded).
    spectral_gap : numpy.ndarray
        (T,) relative gap of the aggregate after its K̂-th eigenvalue (NaN when K̂ = 0).
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

    def client(self, t: int, c: int, client: Client, w: float, controlled: bool) -> None:
        self.per_client["weights"][t, c] = w
        last = client.controller.last if controlled and client.kind != "poison" else None
        if last is not None:
            self.per_client["weights_raw"][t, c] = last.w_raw
            self.per_client["r_used"][t, c] = last.r_used
            self.per_client["novelty"][t, c] = last.details.get("novelty", np.nan)

    def server(self, t: int, result: Any, J_s: np.ndarray, broadcast: np.ndarray,
               clients: Sequence[Client]) -> None:
        xi = self.archetypes
        K = xi.shape[0]
        pats = np.asarray(result.patterns, dtype=np.int8)
        self.patterns.append(pats)
        self.k_hat[t] = int(result.k_hat)
        self.n_patterns[t] = pats.shape[0]
        self.magnetization[t] = metrics.magnetization(pats, xi)
        self.magnetization_max[t] = metrics.magnetization_max(pats, xi)
        self.spurious[t] = metrics.spurious_count(pats, xi)
        vals = _server_values(result, J_s)
        self.top[t, : min(self.n_top, vals.size)] = vals[: self.n_top]
        if 0 < self.k_hat[t] < vals.size:
            self.gap[t] = spectral.spectral_gap(vals, int(self.k_hat[t]))
        self.fro[t] = metrics.frobenius_error(broadcast, self.J_star)
        # exposure over the clients whose examples come from archetypes (label counts only)
        labels = [np.repeat(np.arange(K), cl.label_counts()) for cl in clients
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
            params=params,
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
        Options of :func:`fedlam.lam.factorize`. Without ``k_method`` the server uses
        ``"free"`` (heterogeneity-aware edge over the uploads, :class:`Server`) when L > 1;
        ``{"k_method": "mp"}`` restores the single Marchenko-Pastur rule.
    aggregation : {"equal", "batch"} or numpy.ndarray
        Server aggregation (see :class:`Server`).
    n_top : int
        Number of leading server eigenvalues recorded.
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
        reconstruction step. Default: the LAM's accepted patterns.

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
    gen = as_rng(rng)
    L = len(specs)
    streams = gen.spawn(L + 1)
    cp = dict(controller_params or {})
    clients = [
        Client(s, archetypes, T,
               ctl.make_controller(controller, r=s.r if known_r else None, alpha=ema_alpha,
                                   w_init=w_init, **({} if isinstance(controller, numbers.Real) else cp)),
               streams[c])
        for c, s in enumerate(specs)
    ]
    server = Server(aggregation, lam_params)
    rec = _Recorder(archetypes, T, L, n_top)

    # round 0: no feedback (None), or an empty memory the controllers can judge against
    broadcast = np.zeros((N, N)) if control_round0 else None
    k_broadcast = 0
    for t in range(T):
        uploads = []
        for c, client in enumerate(clients):
            client.observe(t)
            op, w = client.upload(broadcast)
            uploads.append(op)
            rec.client(t, c, client, w, controlled=broadcast is not None)
        sizes = np.array([cl.batch_size for cl in clients], dtype=np.float64)
        weights = server.weights(L, sizes)
        J_s = operators.aggregate(uploads, weights)
        result = server.factorize(J_s, streams[L], uploads, weights,
                                  component_k=max(16, 2 * k_broadcast + 8))
        patterns = np.asarray(result.patterns if reconstruct is None else reconstruct(result),
                              dtype=np.int8)
        if reconstruct is not None:
            check_pm1(patterns, "reconstruct(result)", ndim=2, allow_empty=True)
            if patterns.shape[1:] != (N,):
                raise ValueError(f"reconstruct(result) must return (K', {N}) patterns, got shape {patterns.shape}")
        k_broadcast = patterns.shape[0]
        broadcast = server.broadcast(patterns)
        rec.server(t, result, J_s, broadcast, clients)

    params = {"ema_alpha": ema_alpha, "w_init": w_init, "known_r": known_r,
              "controller_params": cp, "lam_params": dict(lam_params or {}),
              "k_method": server.k_method(L),
              "aggregation": aggregation if isinstance(aggregation, str) else "fixed",
              "control_round0": control_round0, "N": N, "K": K, "L": L, "T": T}
    return rec.history(tuple(s.kind for s in specs), str(controller), params)
