"""The batched network of the simulator and its fused kernels (:class:`MeanFieldBatch`: forward, gradient step,
measurements)."""
from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import torch

from featureode.calculus.activations import get_activation
from featureode.kernel.parametrization import GroupRates, Parametrization
from featureode.sim.measure import (
    ChunkSums,
    GroupSums,
    Measurement,
    SpreadSums,
    TestSet,
    finish_measurement,
    jackknife_groups,
    ntk_factor,
)
from featureode.sim.spec import MLPError, RunSpec, stream


# ----------------------------------------------------------------------------------------------------------------
# the batched network and its kernels
# ----------------------------------------------------------------------------------------------------------------
def _kernels(act: Callable[[torch.Tensor], torch.Tensor]) -> tuple[Callable, Callable]:
    """The SGD step and the measurement-chunk statistics for activation ``act``, as pure tensor functions.

    Shapes: ``w, w0`` (R, N, d); ``b, b0, a, a0`` (R, N); ``x`` (R, C, d) and ``y`` (R, C) for a chunk of C samples;
    ``scale`` = the output scale ``c`` (R, 1).
    """

    def features(w: torch.Tensor, b: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor,
                 x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``σ(u)``, ``σ'(u)`` of the trained neurons and ``σ(u⁰)`` of the frozen initial ones, neuron-major: shape
        (R, N, C), ``u_kb = w_k·x_b + b_k`` (this layout makes both the forward product ``w xᵀ`` and the weight
        gradient ``g x`` plain contiguous matrix products: ≈ 1.6× faster on a CPU than sample-major)."""
        xt = x.transpose(1, 2)
        # the bias is added in the fused elementwise kernel, not by baddbmm: the same floats (the BLAS adds its
        # product to the bias), without baddbmm's copy of the broadcast bias into the (R, N, C) output first
        u = torch.bmm(w, xt) + b.unsqueeze(2)
        u0 = torch.bmm(w0, xt) + b0.unsqueeze(2)
        s, ds = torch.func.jvp(act, (u,), (torch.ones_like(u),))  # type: ignore[misc]  # jvp returns (output, tangent); torch's stub is wider
        return s, ds, act(u0)

    def output(s: torch.Tensor, s0: torch.Tensor, a: torch.Tensor, a0: torch.Tensor,
               scale: torch.Tensor) -> torch.Tensor:
        """Centred output ``c (Σ_k a_k σ_k − Σ_k a⁰_k σ⁰_k)``, shape (R, C) (a reduction the compiler fuses with
        the activation, not a matrix-vector product)."""
        return (s * a.unsqueeze(2) - s0 * a0.unsqueeze(2)).sum(1) * scale

    def gradients(w: torch.Tensor, b: torch.Tensor, a: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor,
                  a0: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                  scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sums over the chunk: ``Σ_b r_b a_k σ'_bk x_b`` (R, N, d), ``Σ_b r_b a_k σ'_bk`` (R, N), ``Σ_b r_b σ_bk``
        (R, N) and ``Σ_b r_b²`` (R,), with ``r = f − y`` (the gradients of ``½ Σ_b r_b²`` divided by ``c``)."""
        s, ds, s0 = features(w, b, w0, b0, x)
        return backward(s, ds, a, output(s, s0, a, a0, scale), y, x)

    def backward(s: torch.Tensor, ds: torch.Tensor, a: torch.Tensor, f: torch.Tensor, y: torch.Tensor,
                 x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The sums of :func:`gradients` from the features ``σ``, ``σ'`` (R, N, C) and the outputs ``f`` (R, C)."""
        r = f - y
        g = ds * a.unsqueeze(2) * r.unsqueeze(1)
        return torch.bmm(g, x), g.sum(2), (s * r.unsqueeze(1)).sum(2), (r * r).sum(1)

    def chunk_sums(w: torch.Tensor, b: torch.Tensor, a: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor,
                   a0: torch.Tensor, x: torch.Tensor, y: torch.Tensor, h: torch.Tensor, x_sq: torch.Tensor,
                   weight: torch.Tensor, scale: torch.Tensor, kappa: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The fields of :class:`~featureode.sim.measure.ChunkSums` for one run (R = 1) over one chunk, then the
        per-sample ``Σ_k σ_k²`` and ``Σ_k a_k² σ'_k²`` (C,); ``x`` (1, C, d), ``y`` (1, C), ``h`` (C, M), ``x_sq``
        and ``weight`` (C,), ``kappa`` = :func:`~featureode.sim.measure.ntk_factor` (a 0-d tensor)."""
        s, ds, s0 = features(w, b, w0, b0, x)
        f = output(s, s0, a, a0, scale)[0]
        s, ds, xc, hc = s[0].T, ds[0].T, x[0], h
        s_sq, slope_sq = (s * s).sum(1), (ds * ds) @ (a[0] * a[0])
        theta = (s_sq + (x_sq + 1) * slope_sq) * kappa
        hx = (hc.unsqueeze(2) * xc.unsqueeze(1)).reshape(xc.shape[0], -1)             # (C, M·d)
        hdx = (hx.T @ ds).reshape(hc.shape[1], xc.shape[1], s.shape[1]).transpose(1, 2)  # (M, N, d)
        return ((weight * (f - y[0]).square()).sum(), hc.T @ f, (hc * hc).T @ (f * f), hc.T @ s, hc.T @ ds, hdx,
                (hc * hc).T @ theta, s_sq, slope_sq)

    return gradients, chunk_sums


def _relu_residual_loop(u: np.ndarray, u0: np.ndarray, b: np.ndarray, b0: np.ndarray, a: np.ndarray, a0: np.ndarray,
                        scale: np.ndarray, y: np.ndarray, lo: int, r: np.ndarray,
                        sq: np.ndarray) -> None:  # pragma: no cover - runs compiled by numba
    """The first pass over one chunk of the CPU ReLU step, on the neuron-major (N, C) products ``u = w xᵀ``,
    ``u⁰ = w⁰ xᵀ`` (no bias) of samples ``lo, …, lo + C − 1``: the residuals ``r_j = c Σ_k (a_k σ(u_kj + b_k) −
    a⁰_k σ(u⁰_kj + b⁰_k)) − y_j`` into ``r`` (C,) (the output summed over ``k = 0, 1, …, N−1`` in that order, row by
    row) and ``Σ_j r_j²`` added to ``sq[0]``."""
    n, c = u.shape
    zero = r.dtype.type(0)
    r[:] = zero
    for k in range(n):
        bk, b0k, ak, a0k = b[k], b0[k], a[k], a0[k]
        for j in range(c):
            uk = u[k, j] + bk
            vk = u0[k, j] + b0k
            s = uk if uk > 0 else zero
            s0 = vk if vk > 0 else zero
            r[j] += s * ak - s0 * a0k
    sc = scale[0]
    total = zero
    for j in range(c):
        rj = r[j] * sc - y[lo + j]
        r[j] = rj
        total += rj * rj
    sq[0] += total


def _relu_mask_loop(u: np.ndarray, b: np.ndarray, r: np.ndarray,
                    m1: np.ndarray) -> None:  # pragma: no cover - runs compiled by numba
    """The second pass: ``u`` (N, C) overwritten in place by the masked residuals ``m_kj = r_j`` where ``u_kj + b_k >
    0``, else 0 (the ReLU gradients are all linear in ``m``: see :class:`_ReluStep`), and ``m1_k += Σ_j m_kj``
    (compiled with reassociation allowed, so that the row sums vectorize: their order is the compiler's)."""
    n, c = u.shape
    zero = r.dtype.type(0)
    for k in range(n):
        bk = b[k]
        total = zero
        for j in range(c):
            v = r[j] if u[k, j] + bk > zero else zero
            u[k, j] = v
            total += v
        m1[k] += total


@functools.lru_cache(maxsize=None)
def _relu_chunk_kernel() -> tuple[Callable[..., None], Callable[..., None]]:
    """:func:`_relu_residual_loop` (no fast-math: no reassociation, no contraction to FMA) and
    :func:`_relu_mask_loop` (reassociation only) compiled by numba, cached on disk."""
    import numba

    return (numba.njit(cache=True, fastmath=False, boundscheck=False, nogil=True)(_relu_residual_loop),
            numba.njit(cache=True, fastmath={"reassoc"}, boundscheck=False, nogil=True)(_relu_mask_loop))


def _chunk_sums(parts: Any) -> list[torch.Tensor]:
    """The element-wise sums of the gradient tuples of a batch's chunks, in chunk order: the first chunk's tensors
    (fresh outputs of its kernel) accumulate the others in place."""
    total: list[torch.Tensor] | None = None
    for part in parts:
        if total is None:
            total = list(part)
        else:
            for acc, v in zip(total, part):
                acc.add_(v)
    assert total is not None  # the batch holds at least one chunk
    return total


def even_chunk(n: int, target: int) -> int:
    """Chunk size ``≤ target`` that splits ``n`` into equal chunks (up to one shorter last chunk)."""
    return math.ceil(n / math.ceil(n / target))


RELU_CHUNK = 128   # samples per chunk of the CPU ReLU step: its (2N, C) products and their masks stay in L2


class _ReluStep:
    """The CPU step sums of one ReLU run: those of :func:`_kernels` ``gradients`` with the float sums in another order
    (relative differences ≈ 2e-7 in float32), from one matrix product per chunk for all three gradients.

    With ``σ = ReLU`` every gradient is linear in the masked residuals ``m_kb = r_b 1[u_kb > 0]`` (``u_kb = w_k·x_b
    + b_k``): ``Σ_b r_b a_k σ'_kb x_b = a_k (m x)_k``, ``Σ_b r_b a_k σ'_kb = a_k (m 1)_k`` and ``Σ_b r_b σ_kb =
    Σ_b m_kb u_kb = w_k·(m x)_k + b_k (m 1)_k``. Per chunk: one product ``[w; w⁰] xᵀ`` into a preallocated (2N, C)
    buffer (no bias: see ``features``), two numba passes (:func:`_relu_residual_loop`: the outputs row by row and the
    residuals; :func:`_relu_mask_loop`: ``m`` in place of ``w xᵀ`` and its row sums ``m 1``), and ``M += m x``
    (N, d) accumulated inside the product; the three gradients are formed from ``M`` and ``m 1`` once per step.
    Against the generic kernel this skips σ, σ', the gradient tensor and its sums, and a pass over the products.
    Chunks hold at most :data:`RELU_CHUNK` samples, half the generic kernel's, so that the (2N, C) products stay in
    the L2 cache (measured: 2.3 against 2.7 ms per step with chunks of 256, N = 1024, B = 2048)."""

    def __init__(self, width: int, dtype: torch.dtype):
        self.width, self.dtype = width, dtype
        self.buffers: dict[int, tuple[torch.Tensor, torch.Tensor, tuple[np.ndarray, ...]]] = {}

    def _buffers(self, c: int) -> tuple[torch.Tensor, torch.Tensor, tuple[np.ndarray, ...]]:
        """The products ``[u; u⁰]`` (2N, c), its first N rows (where the masks ``m`` replace ``u``) and the NumPy
        views of ``u``, ``u⁰`` and of the residuals (c,), for chunks of c."""
        if c not in self.buffers:
            u = torch.empty(2 * self.width, c, dtype=self.dtype)
            r = np.empty(c, dtype=u.numpy().dtype)
            self.buffers[c] = (u, u[:self.width], (u[:self.width].numpy(), u[self.width:].numpy(), r))
        return self.buffers[c]

    def sums(self, p: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor, scale: torch.Tensor,
             chunk: int) -> list[torch.Tensor]:
        """The step sums of ``gradients`` (``Σ r a σ' x``, ``Σ r a σ'``, ``Σ r σ``, ``Σ r²``) over the batch ``x``
        (1, B, d), ``y`` (1, B) in chunks of ``chunk``, for the parameters ``p`` (:data:`PARAMS`, run axis of 1)."""
        w, b, a, w0, b0, a0 = p
        residuals, masks = _relu_chunk_kernel()
        n, batch = self.width, x.shape[1]
        chunk = even_chunk(batch, min(chunk, RELU_CHUNK))
        weights = torch.cat((w[0], w0[0]))          # [w; w⁰] (2N, d): both products in one
        xs = x[0].split(chunk)                      # per chunk (C, d) views
        if batch % chunk == 0:                      # per chunk contiguous (d, C) blocks, in one copy
            xts = x[0].view(batch // chunk, chunk, -1).permute(0, 2, 1).contiguous().unbind(0)
        else:
            xts = x[0].T.contiguous().split(chunk, 1)
        args = tuple(t[0].numpy() for t in (b, b0, a, a0)) + (scale[0].numpy(), y[0].contiguous().numpy())
        sq = np.zeros(1, dtype=args[0].dtype)
        m1 = torch.zeros(n, dtype=self.dtype)
        m1_np = m1.numpy()
        mx = None
        for lo, xt, xc in zip(range(0, batch, chunk), xts, xs):
            u, m, (u_np, u0_np, r_np) = self._buffers(xc.shape[0])
            torch.mm(weights, xt, out=u)
            residuals(u_np, u0_np, *args, lo, r_np, sq)
            masks(u_np, args[0], r_np, m1_np)
            if mx is None:
                mx = torch.mm(m, xc)
            else:
                mx.addmm_(m, xc)                    # M += m x in the product (β = 1)
        assert mx is not None  # the batch holds at least one chunk
        mx, m1 = mx.unsqueeze(0), m1.unsqueeze(0)
        return [a.unsqueeze(2) * mx, a * m1, (w * mx).sum(2) + b * m1, torch.from_numpy(sq)]


class _Compiled:
    """A tensor function of tensors compiled by TorchInductor once per input signature (shapes, strides, dtypes,
    devices: the callers use at most two chunk shapes), falling back to eager execution with a warning.

    Each signature is traced to an ATen graph (``make_fx``) and compiled by ``torch._inductor.compile``; the call then
    runs the generated code directly, without ``torch.compile``'s guard evaluation and runtime wrappers (measured on
    the CPU step's backward kernel: 223 against 412 µs per call, the same floats: it is the same Inductor
    compilation of the same graph). If that fails, ``torch.compile`` is tried before eager execution."""

    def __init__(self, fn: Callable, enabled: bool):
        self.fn = fn
        self.enabled = enabled
        self.graphs: dict[tuple, Callable] = {}
        self.dynamo: Callable | None = None   # the torch.compile fallback

    def __call__(self, *args: torch.Tensor) -> Any:
        if not self.enabled:
            return self.fn(*args)
        if self.dynamo is not None:
            return self._dynamo(*args)
        key = tuple((t.shape, t.stride(), t.dtype, t.device) for t in args)
        graph = self.graphs.get(key)
        if graph is None:
            try:
                from torch.fx.experimental.proxy_tensor import make_fx

                graph = self.graphs[key] = torch._inductor.compile(make_fx(self.fn)(*args), list(args))
            except Exception:  # an Inductor entry point this torch lacks, or a graph it cannot trace
                self.dynamo = torch.compile(self.fn, dynamic=False)
                return self._dynamo(*args)
        return graph(*args)

    def _dynamo(self, *args: torch.Tensor) -> Any:
        try:
            return self.dynamo(*args)  # type: ignore[misc]  # set by __call__ before the first call
        except Exception as exc:  # compiler missing or unsupported op: keep going, slower
            warnings.warn(f"torch.compile failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                          "running eagerly (set [training] compile = false to skip compilation)")
            self.enabled = False
        return self.fn(*args)


PARAMS = ("w", "b", "a", "w0", "b0", "a0")


def init_draw(seed: int, width: int, dim: int, readout_variance: float, bias_std: float
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The init neurons of a run with this seed, as the simulator draws them from its ``init`` stream (float64, CPU):
    ``a ~ N(0, E[a²])`` (width), ``w ~ N(0, I_d)`` (width × dim, eigenbasis coordinates: the whitened weights are
    ``ŵ_i = sqrt(g_i) w_i``) and ``b ~ N(0, σ_b²)``, in this order. ``featureode.ode.meanfield.ReducedFlow(init=…)``
    follows these very neurons (``docs/validation/init_draw.py``)."""
    gen = stream(seed, "init")
    a = torch.randn(width, generator=gen, dtype=torch.float64) * math.sqrt(readout_variance)
    w = torch.randn(width, dim, generator=gen, dtype=torch.float64)
    b = torch.randn(width, generator=gen, dtype=torch.float64) * bias_std
    return a, w, b


class MeanFieldBatch:
    """``R`` independent two-layer networks of width ``N`` on ``d`` inputs (theory §3), parameters stacked on a
    leading run axis.

    ``params``: ``w`` (R, N, d), ``b`` (R, N), ``a`` (R, N) trained; ``w0``, ``b0``, ``a0`` the frozen initial copy
    that defines ``f_init``. ``gamma``: the richness of each run (R,); ``parametrization``: the output scale ``c``,
    learning-rate scale ``q`` and readout variance (shared by the runs); ``rates``: each run's per-group
    learning-rate multipliers ``(η_a, η_w, η_b)`` (default: the parametrization's), which multiply its SGD step per
    group and weight the parts of its eNTK (``Θ = q Σ_g η_g ∇_g f·∇_g f'``).

    Execution: with ``batched`` every step processes all runs in one set of batched matmuls (the GPU layout); otherwise
    runs are stepped one after another (on a CPU this is faster: batching adds no arithmetic efficiency there and
    multiplies the working set). Either way the samples of a step are processed in chunks of ``chunk`` samples whose
    gradient sums are accumulated before the update, so the activations of a chunk stay cache-sized on a CPU.
    """

    def __init__(self, params: dict[str, torch.Tensor], gamma: Sequence[float], activation: str, compile: bool,
                 batched: bool, chunk: int, parametrization: Parametrization, spread: bool = False,
                 rates: Sequence[GroupRates] | None = None):
        self.params = params
        self.spread = bool(spread)   # also measure ‖Kφ_β‖² (a second pass over the test set per measurement)
        w = params["w"]
        self.runs, self.width, self.dim = w.shape
        self.rates = list(rates) if rates is not None else [parametrization.rates] * self.runs
        if len(self.rates) != self.runs:
            raise MLPError(f"{len(self.rates)} sets of group learning rates for {self.runs} runs")
        # per group, each run's multiplier (float64, cast with the step sizes); plain SGD skips every multiply
        self.group_rate = {k: torch.tensor([getattr(r, k) for r in self.rates], dtype=torch.float64)
                           for k in ("a", "w", "b")}
        self.plain = all(r.is_default for r in self.rates)
        self.gamma = torch.tensor(list(gamma), dtype=torch.float64)
        out = [parametrization.output_scale(g, self.width) for g in gamma]
        self.out_scale = out
        self.lr_scale = [parametrization.lr_scale(g, self.width) for g in gamma]
        self.kappa = [ntk_factor(parametrization, g, self.width) for g in gamma]
        self.scale = torch.tensor(out, dtype=torch.float64).to(w).unsqueeze(1)
        self.kappa_t = torch.tensor(self.kappa, dtype=torch.float64).to(w)  # a tensor: no recompilation per value
        # the update factor q c of each run (γ for meanfield), float64 until it is cast with the step sizes
        self.step_factor = torch.tensor([q * c for q, c in zip(self.lr_scale, out)], dtype=torch.float64)
        self.act = get_activation(activation).torch()
        self.batched, self.chunk = batched, chunk
        grads, sums = _kernels(self.act)
        self._grads = _Compiled(grads, compile)
        self._sums = _Compiled(sums, compile)
        # the CPU ReLU step: with compile = true (the default); eager execution keeps the generic kernel, the reference
        self._relu_step = (_ReluStep(self.width, w.dtype)
                           if compile and activation == "relu" and w.device.type == "cpu" and not batched else None)

    @classmethod
    def initialize(cls, specs: Sequence[RunSpec], device: torch.device, dtype: torch.dtype, compile: bool,
                   batched: bool, chunk: int) -> "MeanFieldBatch":
        """Draw ``a ~ N(0, E[a²])``, ``w ~ N(0, I_d)``, ``b ~ N(0, σ_b²)`` per run from its ``init`` stream (float64
        on the CPU, then cast, so the draw does not depend on device or dtype)."""
        n, d = specs[0].cfg.network.width, specs[0].spectrum.dim
        param = specs[0].parametrization
        cols: dict[str, list[torch.Tensor]] = {k: [] for k in ("w", "b", "a")}
        for s in specs:
            a, w, b = init_draw(s.cfg.training.seed, n, d, param.readout_variance, s.cfg.network.bias_std)
            cols["a"].append(a)
            cols["w"].append(w)
            cols["b"].append(b)
        params = {k: torch.stack(v).to(device=device, dtype=dtype) for k, v in cols.items()}
        params.update({k + "0": v.clone() for k, v in params.items()})
        return cls(params, [s.gamma for s in specs], specs[0].cfg.network.activation, compile, batched, chunk, param,
                   rates=[s.parametrization.rates for s in specs])

    def step(self, x: torch.Tensor, y: torch.Tensor, lr: Sequence[float], runs: Sequence[int]) -> list[float]:
        """One SGD step of ``runs`` (all runs when ``batched``) with gradient-flow increments ``lr = η`` (0 freezes a
        run) on samples ``x`` (len(runs), B, d), ``y`` (len(runs), B); the SGD rate is ``η q`` (times ``η_g`` for
        group g). Returns the batch losses ``½ mean_b r_b²`` before the step."""
        if self.batched:
            if list(runs) != list(range(self.runs)):
                raise MLPError("a batched step takes every run (give finished runs lr = 0)")
            return self._step_group(slice(0, self.runs), x, y, lr)
        return [loss for j, i in enumerate(runs)
                for loss in self._step_group(slice(i, i + 1), x[j:j + 1], y[j:j + 1], lr[j:j + 1])]

    def _step_group(self, runs: slice, x: torch.Tensor, y: torch.Tensor, lr: Sequence[float]) -> list[float]:
        """Accumulate the chunk gradient sums of the runs ``runs`` (a slice, so parameters are updated through
        views), then ``θ_g −= (η η_g q c / B) Σ_b …`` (``∂f/∂θ`` carries ``c``, the rate is ``η η_g q``): a group
        whose multiplier is 1 in every run of the slice is updated exactly as plain SGD, one whose multiplier is 0 in
        every run is not touched (bit for bit frozen)."""
        p = [self.params[k][runs] for k in PARAMS]
        scale, batch = self.scale[runs], x.shape[1]
        sums = None
        if self._relu_step is not None and p[0].shape[0] == 1:
            try:
                sums = self._relu_step.sums(p, x, y, scale, self.chunk)
            except Exception as exc:  # numba missing or failing: the sums only read the parameters, so fall back
                warnings.warn(f"the CPU ReLU step failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                              "using the generic compiled kernel (slower)")
                self._relu_step = None
        if sums is not None:
            grad_w, grad_b, grad_a, sq = sums
        else:
            grad_w, grad_b, grad_a, sq = _chunk_sums(
                self._grads(*p, x[:, lo:lo + self.chunk], y[:, lo:lo + self.chunk], scale)
                for lo in range(0, batch, self.chunk))
        rate64 = torch.tensor(list(lr), dtype=torch.float64) * self.step_factor[runs] / batch
        coef = rate64.to(x).unsqueeze(1)
        if self.plain:
            p[0].sub_(coef.unsqueeze(-1) * grad_w)
            p[1].sub_(coef * grad_b)
            p[2].sub_(coef * grad_a)
            return (0.5 * sq / batch).tolist()
        for param, grad, key in ((p[0], grad_w, "w"), (p[1], grad_b, "b"), (p[2], grad_a, "a")):
            group = self.group_rate[key][runs]
            if bool((group == 1).all()):
                c = coef
            elif bool((group == 0).all()):
                continue
            else:
                c = (rate64 * group).to(x).unsqueeze(1)
            param.sub_(c.unsqueeze(-1) * grad if key == "w" else c * grad)
        return (0.5 * sq / batch).tolist()

    def output(self, x: torch.Tensor) -> torch.Tensor:
        """Centred outputs ``f(x)`` of every run, ``x`` (R, B, d) → (R, B) (eager; for checks and tests)."""
        p = self.params
        u = torch.baddbmm(p["b"].unsqueeze(1), x, p["w"].transpose(1, 2))
        u0 = torch.baddbmm(p["b0"].unsqueeze(1), x, p["w0"].transpose(1, 2))
        out = torch.bmm(self.act(u), p["a"].unsqueeze(-1)) - torch.bmm(self.act(u0), p["a0"].unsqueeze(-1))
        return out.squeeze(-1) * self.scale

    def measure(self, run: int, test: TestSet, support: Sequence[int]) -> Measurement:
        """Test loss, projections, eNTK Rayleigh quotients (with their parts, Gram and standard errors), ``r_i``,
        ``⟨a²⟩`` and the joint moments of the dimensions ``support`` of one run on its test set (all samples, all
        neurons; see :mod:`featureode.sim.measure`)."""
        args, scale, kappa = [self.params[k][run:run + 1] for k in PARAMS], self.scale[run:run + 1], self.kappa[run]
        kappa_t = self.kappa_t[run]
        rates = self.rates[run]
        weights = None if rates.is_default else (rates.a, rates.w, rates.b)
        if self.spread and weights is not None:
            raise MLPError("the spread measurement ‖Kφ_β‖² is not weighted by [training] lr_scale yet; measure it "
                           "with plain SGD (lr_scale 1 for every group)")
        total: ChunkSums | None = None
        n_chunks = math.ceil(test.x.shape[0] / test.chunk)
        n_groups = jackknife_groups(n_chunks, test.h.shape[1], self.width, self.dim)
        groups: list[GroupSums | None] = [None] * n_groups
        with torch.no_grad():
            for c, (x, y, h, x_sq, weight) in enumerate(test.chunks()):
                *fields, s_sq, slope_sq = self._sums(*args, x[None], y[None], h, x_sq, weight, scale, kappa_t)
                part = ChunkSums(*fields)
                if total is None:
                    total = part
                else:
                    total += part
                g, real = c * n_groups // n_chunks, int(weight.sum())
                piece = GroupSums.of_chunk(part, h, x_sq, s_sq, slope_sq, real, weights)
                prev = groups[g]
                groups[g] = piece if prev is None else prev + piece
            p = self.params
            present = [g for g in groups if g is not None]
            m = finish_measurement(total, present, test.n, p["a"][run], p["w"][run], p["a0"][run],  # type: ignore[arg-type]  # the test set holds at least one chunk
                                   kappa, support, weights)
            if not self.spread:
                return m
            second, second_se = self._second_moment(run, test, groups, n_chunks)
            return dataclasses.replace(m, second_moment=second, second_moment_stderr=second_se)

    def _second_moment(self, run: int, test: TestSet, groups: "list[GroupSums | None]",
                       n_chunks: int) -> tuple[np.ndarray, np.ndarray]:
        """``‖Kφ_β‖²`` of every measured mode with its jackknife standard error: the second pass over the test set
        of :class:`~featureode.sim.measure.SpreadSums` (two Jacobian–vector products per mode and chunk, and the two
        vector–Jacobian products of its jackknife), after :meth:`measure`'s first pass gave the group sums
        ``groups``. Eager; reads the parameters only (no random numbers, no training state)."""
        p = self.params
        w, b, a = p["w"][run], p["b"][run], p["a"][run]
        kappa = self.kappa[run]
        index = [c for c, g in enumerate(groups) if g is not None]
        position = {c: k for k, c in enumerate(index)}
        acc = SpreadSums([groups[c] for c in index], a, kappa)  # type: ignore[misc]  # index holds the groups that are not None
        a2 = a * a
        for c, (x, _, h, x_sq, weight) in enumerate(test.chunks()):
            u = torch.addmm(b, x, w.T)                                       # (C, N)
            s, ds = torch.func.jvp(self.act, (u,), (torch.ones_like(u),))  # type: ignore[misc]  # jvp returns (output, tangent); torch's stub is wider
            theta = ((s * s).sum(1) + (x_sq + 1) * ((ds * ds) @ a2)).double() * kappa
            acc.add(position[c * len(groups) // n_chunks], s, ds, x, h, theta, weight)
        return acc.finish()

    def ntk_top(self, run: int, probe: torch.Tensor) -> float:
        """Top eigenvalue of the empirical NTK ``q J Jᵀ / P`` of one run on the probe inputs (P, d), with ``J`` the
        per-sample gradients of ``f`` with respect to the trained ``(a, w, b)`` (all neurons); with per-group
        learning rates the gradient-flow kernel ``(q/P) Σ_g η_g J_g J_gᵀ``."""
        p = self.params
        theta = {k: p[k][run] for k in ("a", "w", "b")}
        inverse_scale = 1.0 / self.out_scale[run]  # f = (Σ_k a_k σ_k) / (1/c)

        def f_single(th: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
            return (th["a"] * self.act(th["w"] @ x + th["b"])).sum() / inverse_scale

        jac = torch.func.vmap(torch.func.grad(f_single), in_dims=(None, 0))(theta, probe)
        rates = self.rates[run]
        if rates.is_default:
            j = torch.cat([jac[k].reshape(probe.shape[0], -1) for k in ("a", "w", "b")], dim=1)
            jj = j @ j.T
        else:
            jj = sum(getattr(rates, k) * (jk @ jk.T) for k in ("a", "w", "b") if getattr(rates, k) != 0
                     for jk in (jac[k].reshape(probe.shape[0], -1),))
        gram = (self.lr_scale[run] / probe.shape[0]) * jj
        return float(torch.linalg.eigvalsh(gram.double())[-1])




