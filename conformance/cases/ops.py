"""Cases for specs/ops.md: opmath, fresh outputs, opaque custom ops, ATen-valued ops.

Expected values of ATen-valued ops are eager PyTorch's, computed here on private copies.
"""

import warnings
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from aotspec.errors import UnsupportedError
from aotspec.versions import traces_generators

from ..case import (
    BackwardRaises,
    Case,
    Identical,
    Layout,
    Raises,
    Separate,
    Shares,
    SparseValues,
    StorageBytes,
    Values,
    Version,
    eager_only,
)

# A custom op pair registered with torch.library: schema, CPU kernel, fake kernel.


@torch.library.custom_op("aotspec_conformance::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, factor: float) -> None:
    x.mul_(factor)


@scale_.register_fake
def _(x, factor):
    return None


@torch.library.custom_op("aotspec_conformance::doubled", mutates_args=())
def doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@doubled.register_fake
def _(x):
    return torch.empty_like(x)


def _opaque_program(x):
    torch.ops.aotspec_conformance.scale_(x, 3.0)
    return torch.ops.aotspec_conformance.doubled(x)


def _functional_opaque_program(x):
    return torch.ops.aotspec_conformance.doubled(x) + 1


def _bfloat16_sum(x):
    return x.sum()


def _exp_and_sigmoid(x):
    return x.exp(), x.sigmoid()


def _clone_transposed(x):
    return x.t().clone()


# ATen-valued ops: eager's values, computed here on private copies.

_M = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
_SIGNAL = torch.tensor([[[0.5, -1.0, 2.0, 0.0, 1.5, -0.5]]])
_KERNEL = torch.tensor([[[1.0, -2.0, 0.25]], [[0.5, 0.5, -1.0]]])
_IMAGES = torch.arange(24.0).view(2, 3, 2, 2).sin()


def _empty_with_a_zero_stride():
    return torch.empty_strided((5, 5, 5), (2, 0, 1))


def _cumsum(x):
    return torch.cumsum(x, 0)


def _double_the_diagonal(x):
    d = x.diagonal()
    d.mul_(2)
    return d


def _functional_copy_into_every_other(x, y):
    return torch.ops.aten.copy(x[::2], y)  # what functionalizing x[::2].copy_(y) computes


def _scatter_into_the_gap(x, y):
    """A window whose offset counts from the storage's start: it lands in the element between
    x[::2]'s two, which is not an element of the view."""
    return torch.ops.aten.as_strided_scatter(x[::2], y, (1,), (1,), 1)


def _scatter_before_the_view(x, y):
    """A window at the storage's start, before x[1:3]'s first element: not an element of the
    view."""
    return torch.ops.aten.as_strided_scatter(x[1:3], y, (1,), (1,), 0)


def _scatter_into_nothing(x, y):
    # what functionalizing a write through the empty view x[:0] computes
    return torch.ops.aten.as_strided_scatter(x[:0], y[:0], (0,), (1,), 0)


def _sin_into(x, y):
    return torch.sin(x, out=y)


def _sin_into_wrong_size(x, y):
    return torch.sin(x, out=y[:2])


def _foreach_double(a, b):
    torch._foreach_mul_([a, b], 2.0)


def _batch_norm(x, weight, bias, running_mean, running_var):
    return F.batch_norm(x, running_mean, running_var, weight, bias, training=True, momentum=0.25)


def _batch_norm_world():
    return {
        "x": _IMAGES.clone().requires_grad_(),
        "weight": torch.tensor([1.0, 2.0, -0.5], requires_grad=True),
        "bias": torch.tensor([0.0, 0.5, 1.0], requires_grad=True),
        "running_mean": torch.zeros(3),
        "running_var": torch.ones(3),
    }


def _eager(program, world: dict, names: list[str], hooks=None):
    """`program` run by eager PyTorch on `world`, backpropagating the sum of its output: the
    world afterwards (gradients as `name.grad`) and the output."""
    context = torch.autograd.graph.saved_tensors_hooks(*hooks) if hooks else nullcontext()
    with context:
        out = program(*[world[name] for name in names])
    out.sum().backward()
    grads = {f"{name}.grad": t.grad for name, t in world.items() if t.grad is not None}
    return {**world, **grads, "out0": out.detach()}


_BATCH_NORM_NAMES = ["x", "weight", "bias", "running_mean", "running_var"]
_BATCH_NORM = _eager(_batch_norm, _batch_norm_world(), _BATCH_NORM_NAMES)


def _conv(x, w):
    return F.conv1d(x * 2, w, padding=1)


def _norms(x, y):
    return torch.linalg.vector_norm(x, dim=1) + F.cosine_similarity(x, y) + x.std(dim=1)


def _norms_world():
    # x's first row is zero: the norm's backward zeroes its quotient 0 / 0 there (masked_fill_)
    return {
        "x": torch.cat([torch.zeros(1, 3), _M[1:] - 5.5]).requires_grad_(),
        "y": _M.flip(0).clone().requires_grad_(),
    }


_NORMS = _eager(_norms, _norms_world(), ["x", "y"])


def _transposed_losses(x, w, target):
    # as nn.MultiheadAttention(batch_first=True) returns: a matmul's rows, viewed and transposed
    h = (x @ w).view(3, 2, 4).transpose(0, 1)
    losses = F.mse_loss(h, target) + F.smooth_l1_loss(h, target)
    losses = losses + F.huber_loss(h, target, delta=0.5)
    return losses + (F.elu(h) * target).sum() + (F.hardtanh(h) * target).sum()


def _mean_squared(x, target):
    return F.mse_loss(x * 2, target)


def _summed_smooth_l1(x, target):
    return F.smooth_l1_loss(x * 2, target, reduction="sum")


def _transposed_losses_world():
    return {
        "x": torch.linspace(-2.0, 2.0, 30).view(6, 5).requires_grad_(),
        "w": torch.linspace(1.0, -1.0, 20).view(5, 4).requires_grad_(),
        "target": torch.linspace(-0.5, 0.5, 24).view(2, 3, 4),
    }


_TRANSPOSED_LOSSES = _eager(
    _transposed_losses, _transposed_losses_world(), ["x", "w", "target"]
)


def _pack_bf16(x):
    return x.to(torch.bfloat16)


def _unpack_f32(x):
    return x.to(torch.float32)


def _conv_world():
    return {"x": _SIGNAL.clone().requires_grad_(), "w": _KERNEL.clone().requires_grad_()}


_CONV = _eager(_conv, _conv_world(), ["x", "w"], hooks=(_pack_bf16, _unpack_f32))


def _draws(x, generator):
    first = torch.rand(3, generator=generator)
    x.bernoulli_(0.5, generator=generator)
    second = torch.randn(2, generator=generator)
    return first, second


def _draw_world():
    return {"x": torch.zeros(6), "generator": torch.Generator().manual_seed(7)}


def _eager_draws():
    world = _draw_world()
    first, second = _draws(world["x"], world["generator"])
    return first, second, world["x"]


_DRAWS = _eager_draws()


def _bernoulli_into(x, generator):
    x.bernoulli_(0.5, generator=generator)


def _transposed_draw_world():
    return {"x": torch.zeros(4, 6).t(), "generator": torch.Generator().manual_seed(3)}


def _eager_transposed_draw():
    world = _transposed_draw_world()
    _bernoulli_into(world["x"], world["generator"])
    return world["x"]


_TRANSPOSED_DRAW = _eager_transposed_draw()


def _where_generators_trace(expect: list) -> list:
    """`expect` where torch's tracer records a generator; else compiling refuses the program
    (`r[ops.random.generator-capture]`)."""
    if traces_generators():
        return expect
    return [Raises(UnsupportedError, rule="ops.random.generator-capture", match="Generator")]


#: Eager draws on every torch: only a compiled program is refused where generators do not trace.
_GENERATOR_SKIP = (
    {}
    if traces_generators()
    else {"torch-eager": "eager draws from any generator; only capture depends on the torch"}
)


def _dropout_after_an_unused_draw(x):
    torch.rand(4)  # drawn, never read
    return F.dropout(x, 0.5, training=True) * 3


def _seeded(x):
    torch.manual_seed(11)  # the caller seeds the default generator before the call
    return {"x": x.clone().requires_grad_()}


def _eager_dropout():
    with torch.random.fork_rng():
        return _eager(_dropout_after_an_unused_draw, _seeded(torch.ones(2, 5)), ["x"])


_DROPOUT = _eager_dropout()


_Z = torch.tensor([[1.0 + 2.0j, -0.5 + 1.0j], [2.0 - 1.0j, 0.25 + 0.5j]])
_W = torch.tensor([[0.5 - 1.0j, 1.0 + 1.0j], [-1.0 + 0.5j, 2.0 + 0.0j]])


def _complex_world():
    return {"x": _Z.clone().requires_grad_(), "w": _W.clone().requires_grad_()}


def _complex_chain(x, w):
    # mm, mul, div, add, exp, sub and abs: table ops whose gradients conjugate
    return ((x @ w) * w / (w + 2.0)).exp().sub(x, alpha=0.5 + 0.5j).abs()


_COMPLEX_CHAIN = _eager(_complex_chain, _complex_world(), ["x", "w"])


def _real_times_complex_world():
    return {"x": torch.tensor([1.0, -2.0]).requires_grad_(), "w": _W[0].clone().requires_grad_()}


def _real_times_complex(x, w):
    return (x * w).abs()


_REAL_TIMES_COMPLEX = _eager(_real_times_complex, _real_times_complex_world(), ["x", "w"])


def _complex_spectrum(x):
    # x's autocorrelation through its spectrum: fft, a conjugate view, ifft, the real parts
    spectrum = torch.fft.fft(x)
    return torch.fft.ifft(spectrum * spectrum.conj()).real


def _signal_world():
    return {"x": torch.tensor([1.0 + 1.0j, 2.0, 0.5 - 0.5j, -1.0]).requires_grad_()}


_SPECTRUM = _eager(_complex_spectrum, _signal_world(), ["x"])


def _half_complex(x, z):
    # complex32 made by casts, added, viewed as float16 pairs, conjugated, and on a gradient's way
    h = z.to(torch.complex32)
    doubled = h + h
    magnitudes = (x.to(torch.complex32) * 2).to(torch.complex64).abs()
    return doubled, torch.view_as_real(doubled), h.conj().to(torch.complex64), magnitudes


def _half_complex_world():
    # 1.1 and 1000.1 are not float16 values: the cast rounds them
    return {
        "x": torch.tensor([0.1, -2.5, 3.0]).requires_grad_(),
        "z": torch.tensor([1.1 + 2.0j, -0.3 + 0.7j, 1000.1 - 1.0j]),
    }


def _eager_half_complex():
    world = _half_complex_world()
    with warnings.catch_warnings():  # eager calls its complex32 support experimental
        warnings.simplefilter("ignore")
        outs = _half_complex(world["x"], world["z"])
    outs[3].sum().backward()
    named = {f"out{k}": out.detach() for k, out in enumerate(outs)}
    return {**named, "x.grad": world["x"].grad}


_HALF_COMPLEX = _eager_half_complex()


def _svd_magnitudes(a):
    u, s, vh = torch.linalg.svd(a)
    return u.abs(), s, vh.abs()


_EAGER_CHECKS_VALUES = "eager runs svd's check on the values (the loss here passes it)"

# A real matrix with a pair of complex eigenvalues, so complex eigenvectors.
_A = torch.tensor([[1.0, 2.0, 0.5], [-1.0, 0.5, 1.0], [0.25, -0.5, 2.0]])
_HERMITIAN = torch.tensor([[2.0, 1.0 + 1.0j], [1.0 - 1.0j, 3.0]])


def _eigenvector_magnitudes(a):
    # |V| and the eigenvalues' real parts: a loss that ignores the eigenvectors' phases
    eigenvalues, eigenvectors = torch.linalg.eig(a)
    return eigenvectors.abs() + eigenvalues.real.unsqueeze(0)


def _eigenvector_real_parts(a):
    # Re V changes when a column is multiplied by e^{i phi}: eager's backward refuses the loss
    return torch.linalg.eig(a)[1].real


def _hermitian_eigenvector_real_parts(h):
    return torch.linalg.eigh(h)[1].real


def _eig_world():
    return {"a": _A.clone().requires_grad_()}


_EIGENVECTOR_MAGNITUDES = _eager(_eigenvector_magnitudes, _eig_world(), ["a"])


def _conjugate_view(x):
    y = x.conj()
    y[0, 0] = 1.0 + 1.0j
    return y, y.imag


def _lstm(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """One LSTM layer (`nn.LSTM`'s op): on CPU its kernel is mkldnn_rnn_layer, whose backward
    reads the workspace its forward returns with grad mode on."""
    out, _, _ = torch.lstm(x, (h, c), (w_ih, w_hh, b_ih, b_hh), True, 1, 0.0, True, False, False)
    return out


_LSTM_NAMES = ["x", "h", "c", "w_ih", "w_hh", "b_ih", "b_hh"]


def _lstm_world():
    generator = torch.Generator().manual_seed(0)
    sizes = [(3, 2, 4), (1, 2, 5), (1, 2, 5), (20, 4), (20, 5), (20,), (20,)]
    world = {
        name: torch.randn(size, generator=generator, device="cpu")  # the runner moves them
        for name, size in zip(_LSTM_NAMES, sizes, strict=True)
    }
    for name in _LSTM_NAMES[3:]:
        world[name].requires_grad_()
    return world


def _lstm_with_grad(*tensors):
    with torch.enable_grad():
        return _lstm(*tensors)


_LSTM = _eager(_lstm, _lstm_world(), _LSTM_NAMES)


def _device_choices(x, h, w_ih, w_hh, b_ih, b_hh, q, scale, shift):
    """Batch norm in training, one GRU layer and attention: on CUDA, eager runs cuDNN and a fused
    attention kernel, none of which has a CPU kernel (`r[ops.aten-values.device-choices]`)."""
    normed = F.batch_norm(x, None, None, scale, shift, training=True)
    rnn, _ = torch.gru(x, h, (w_ih, w_hh, b_ih, b_hh), True, 1, 0.0, True, False, False)
    attended = F.scaled_dot_product_attention(q, q, q)
    return torch.cat([normed.flatten(), rnn.flatten(), attended.flatten()])


_DEVICE_CHOICES_NAMES = ["x", "h", "w_ih", "w_hh", "b_ih", "b_hh", "q", "scale", "shift"]


def _device_choices_world():
    generator = torch.Generator().manual_seed(0)
    sizes = [(3, 2, 4), (1, 2, 5), (15, 4), (15, 5), (15,), (15,), (2, 2, 3, 4), (2,), (2,)]
    world = {
        name: torch.randn(size, generator=generator, device="cpu")  # the runner moves them
        for name, size in zip(_DEVICE_CHOICES_NAMES, sizes, strict=True)
    }
    for name in ["x", "w_ih", "w_hh", "b_ih", "b_hh", "q", "scale", "shift"]:
        world[name].requires_grad_()
    return world


_DEVICE_CHOICES = _eager(_device_choices, _device_choices_world(), _DEVICE_CHOICES_NAMES)


def _rrelu(x):
    return F.rrelu(x, 0.0, 1.0, training=True)


def _rrelu_world():
    torch.manual_seed(5)  # the caller seeds the default generator before the call
    return {"x": torch.tensor([-1.0, 2.0, -3.0, 4.0, -0.5, 0.25]).requires_grad_()}


def _eager_rrelu():
    with torch.random.fork_rng():
        return _eager(_rrelu, _rrelu_world(), ["x"])


_RRELU = _eager_rrelu()


def _batch_norm_with_update(x, weight, bias, running_mean, running_var):
    aten = torch.ops.aten
    return aten._batch_norm_with_update(x, weight, bias, running_mean, running_var, 0.25, 1e-5)[0]


_BATCH_NORM_WITH_UPDATE = _eager(_batch_norm_with_update, _batch_norm_world(), _BATCH_NORM_NAMES)


def _batch_norm_in_eval(x, weight, bias, running_mean, running_var):
    aten = torch.ops.aten
    args = (x, weight, bias, running_mean, running_var)
    return aten._native_batch_norm_legit(*args, False, 0.25, 1e-5)[0]


_BATCH_NORM_IN_EVAL = _eager(_batch_norm_in_eval, _batch_norm_world(), _BATCH_NORM_NAMES)


def _statistics_read_then_updated(x, weight, bias, running_mean, running_var):
    before = weight * running_mean  # autograd saves running_mean for weight's gradient
    normalized = _batch_norm(x, weight, bias, running_mean, running_var)
    return normalized.sum(dim=(0, 2, 3)) + before


_STATISTICS_READ = _eager(_statistics_read_then_updated, _batch_norm_world(), _BATCH_NORM_NAMES)


def _rrelu_noise_world():
    return {"x": torch.tensor([-1.0, 2.0, -3.0, 4.0]).requires_grad_(), "noise": torch.zeros(4)}


def _rrelu_into_noise(x, noise):
    return torch.ops.aten.rrelu_with_noise(x, noise, 0.25, 0.25, True)  # one slope: no draw


_RRELU_NOISE = _eager(_rrelu_into_noise, _rrelu_noise_world(), ["x", "noise"])


def _observe_per_channel(x, running_min, running_max, scale, zero_point):
    on = torch.ones(1, dtype=torch.long)
    state = (running_min, running_max, scale, zero_point)
    observe = torch.ops.aten._fused_moving_avg_obs_fq_helper
    return observe(x, on, on, *state, 0.01, -128, 127, 0, True, True)[0]


def _observe_per_tensor(x, running_min, running_max, scale, zero_point):
    on = torch.ones(1, dtype=torch.long)
    state = (running_min, running_max, scale, zero_point)
    observe = torch.ops.aten._fused_moving_avg_obs_fq_helper
    return observe(x, on, on, *state, 0.01, -128, 127, 0, False, True)[0]


_OBSERVER_NAMES = ["x", "running_min", "running_max", "scale", "zero_point"]


def _observer_world():
    """Empty per-channel state, as `FusedMovingAvgObsFakeQuantize` starts it, and one-element
    qparams."""
    return {
        "x": torch.tensor([[1.0, -2.0, 0.5], [3.0, 10.0, -1.0]], requires_grad=True),
        "running_min": torch.empty(0),
        "running_max": torch.empty(0),
        "scale": torch.ones(1),
        "zero_point": torch.zeros(1, dtype=torch.int32),
    }


_OBSERVER = _eager(_observe_per_channel, _observer_world(), _OBSERVER_NAMES)


def _every_other_weighted(x):
    return torch.as_strided_copy(x, (2,), (2,), 1) * torch.tensor([1.0, 2.0])


def _scatter_every_other(x, src):
    return torch.as_strided_scatter(x, src, (2,), (2,), 1) * torch.arange(1.0, 5.0)


def _write_every_other(x, src):
    # the write as_strided_scatter stands for, which eager differentiates as the spec does
    out = x.clone()
    out.as_strided((2,), (2,), 1).copy_(src)
    return out * torch.arange(1.0, 5.0)


def _scatter_world():
    return {"x": torch.zeros(4).requires_grad_(), "src": torch.zeros(2).requires_grad_()}


_WRITE_EVERY_OTHER = _eager(_write_every_other, _scatter_world(), ["x", "src"])


def _svd_rebuilt(b):
    u, s, vh = torch.linalg.svd(b, full_matrices=False)
    return u @ torch.diag(s) @ vh


def _svd_world():
    return {"b": torch.tensor([[2.0, 1.0], [0.5, -1.0], [1.0, 3.0]], requires_grad=True)}


_SVD = _eager(_svd_rebuilt, _svd_world(), ["b"])


#: The weights of each position of a (3, 2) output: the gradient of the weighted sum.
_WEIGHTS = torch.tensor([[1.0, 2.0], [4.0, 8.0], [16.0, 32.0]])


def _put_rows_at_a_mask(x, mask, values):
    return torch.index_put(x, (mask,), values) * _WEIGHTS


def _fill_rows_with_a_value(x, index, value):
    return x.index_fill(0, index, value) * _WEIGHTS


def _qr_rebuilt(a):
    q, r = torch.linalg.qr(a)
    return (q * torch.arange(1.0, 4.0)) @ r


def _qr_world():
    return {
        "a": torch.tensor(
            [[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0], [1.0, 0.0, 1.0]]
        ).requires_grad_()
    }


_QR = _eager(_qr_rebuilt, _qr_world(), ["a"])


CASES = [
    Case(
        name="ops.complex-chain-values-and-conjugate-gradients-as-eager",
        rules=["ops.complex.aten-values", "ops.complex.conjugate-grad", "memory.layout.complex"],
        setup=_complex_world,
        args=["x", "w"],
        program=_complex_chain,
        backward=True,
        # eager's values and gradients; the gradients conjugate w, x @ w and exp's output
        expect=[Values(name, _COMPLEX_CHAIN[name]) for name in ["out0", "x.grad", "w.grad"]],
    ),
    Case(
        name="ops.complex-real-input-gets-the-real-part-of-its-gradient",
        rules=["ops.complex.real-input-grad"],
        setup=_real_times_complex_world,
        args=["x", "w"],
        program=_real_times_complex,
        backward=True,
        expect=[
            Values(name, _REAL_TIMES_COMPLEX[name]) for name in ["out0", "x.grad", "w.grad"]
        ]
        + [Layout("x.grad", dtype=torch.float32), Layout("w.grad", dtype=torch.complex64)],
    ),
    Case(
        name="ops.complex-fft-autocorrelation-as-eager",
        rules=["ops.aten-values", "ops.aten-derivatives", "memory.layout.conj-neg"],
        setup=_signal_world,
        args=["x"],
        program=_complex_spectrum,
        backward=True,
        # fft's derivative and conj() (a conjugate view the next op reads) as in eager
        expect=[Values(name, _SPECTRUM[name]) for name in ["out0", "x.grad"]],
    ),
    Case(
        name="ops.hash-tensor-returns-uint64-as-eager",
        rules=["memory.layout.unsigned"],
        setup=lambda: {"x": torch.arange(6.0).reshape(2, 3)},
        args=["x"],
        program=lambda x: (torch.hash_tensor(x), torch.hash_tensor(x, dim=1)),
        # eager's values: the xor of the elements' float64 bits
        expect=[
            Values("out0", torch.tensor(4610560118520545280, dtype=torch.uint64)),
            Layout("out0", dtype=torch.uint64, shape=()),
            Values(
                "out1",
                torch.tensor([9218868437227405312, 4615063718147915776], dtype=torch.uint64),
            ),
            Layout("out1", dtype=torch.uint64, shape=(2,)),
        ],
    ),
    Case(
        name="ops.uint32-add-raises-eagers-error",
        rules=["memory.layout.unsigned"],
        setup=lambda: {"x": torch.tensor([1, 40000], dtype=torch.uint32)},
        args=["x"],
        # eager has no add kernel for uint32 (add is a table op): its error, not numpy's sum
        program=lambda x: x + x,
        expect=[Raises(RuntimeError, match="not implemented for 'UInt32'")],
    ),
    Case(
        name="ops.matmul-of-two-dtypes-raises-eagers-error",
        rules=["ops.kernel-dtype-checks", "boundary.failed-call"],
        setup=lambda: {
            "x": torch.ones(2, 3, requires_grad=True),
            "w": torch.ones(4, 3, dtype=torch.bfloat16),
        },
        args=["x", "w"],
        # F.linear is addmm here; its meta kernel accepts float32 and bfloat16, its kernel not
        program=lambda x, w: F.linear(x, w).sum(),
        expect=[Raises(RuntimeError, match="expected m1 and m2 to have the same dtype")],
    ),
    Case(
        name="ops.matrix-vector-product-of-two-dtypes-raises-eagers-error",
        rules=["ops.kernel-dtype-checks"],
        setup=lambda: {"m": torch.ones(2, 3), "v": torch.ones(3, dtype=torch.float64)},
        args=["m", "v"],
        program=lambda m, v: m @ v,
        expect=[Raises(RuntimeError, match="addmv input tensors must have the same dtype")],
    ),
    Case(
        name="ops.complex32-copy-rounds-each-part-through-float32",
        rules=["memory.layout.complex32"],
        setup=lambda: {
            "dst": torch.zeros(1, dtype=torch.complex32),
            # 1 + 2**-11 + 2**-40: float32 rounds it to 1 + 2**-11, a float16 tie, then to 1;
            # float16 directly would round it up to 1 + 2**-10
            "src": torch.tensor(
                [complex(1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40))], dtype=torch.complex128
            ),
        },
        args=["dst", "src"],
        program=lambda dst, src: torch.view_as_real(dst.copy_(src)),
        expect=[Values("out0", [[1.0, -1.0]]), Values("dst", [1.0 - 1.0j])],
    ),
    Case(
        name="ops.complex32-values-views-and-gradients-as-eager",
        rules=["memory.layout.complex32"],
        setup=_half_complex_world,
        args=["x", "z"],
        program=_half_complex,
        backward=True,
        expect=[
            Values(name, _HALF_COMPLEX[name])
            for name in ["out0", "out1", "out2", "out3", "x.grad"]
        ]
        + [
            Layout("out0", dtype=torch.complex32, shape=(3,), strides=(1,)),
            # a complex32 element is two float16s: sizes and strides count float16s
            Layout("out1", dtype=torch.float16, shape=(3, 2), strides=(2, 1), offset=0),
            Shares("out0", "out1"),
        ],
    ),
    Case(
        name="ops.complex-svd-derivative-that-checks-values-is-refused",
        rules=["ops.aten-derivatives.value-checks"],
        setup=lambda: {"a": _Z.clone().requires_grad_()},
        args=["a"],
        program=_svd_magnitudes,
        backward=True,
        expect=[Raises(UnsupportedError, rule="ops.aten-derivatives.value-checks", match="svd")],
        skip={"torch-eager": _EAGER_CHECKS_VALUES},
    ),
    Case(
        name="ops.eig-derivative-checks-the-phases-when-the-backward-runs",
        rules=["ops.aten-derivatives.value-checks.phases"],
        setup=_eig_world,
        args=["a"],
        program=_eigenvector_real_parts,
        backward=True,
        expect=[BackwardRaises(RuntimeError, match="linalg_eig_backward: The eigenvectors")],
    ),
    Case(
        name="ops.eigh-derivative-checks-the-phases-when-the-backward-runs",
        rules=["ops.aten-derivatives.value-checks.phases"],
        setup=lambda: {"h": _HERMITIAN.clone().requires_grad_()},
        args=["h"],
        program=_hermitian_eigenvector_real_parts,
        backward=True,
        expect=[BackwardRaises(RuntimeError, match="linalg_eigh_backward: The eigenvectors")],
    ),
    Case(
        name="ops.eig-derivative-of-a-loss-that-ignores-the-phases",
        rules=["ops.aten-derivatives.value-checks.phases"],
        setup=_eig_world,
        args=["a"],
        program=_eigenvector_magnitudes,
        backward=True,
        expect=[Values(name, _EIGENVECTOR_MAGNITUDES[name]) for name in ["out0", "a.grad"]],
    ),
    Case(
        name="ops.complex-argument-with-a-lazy-conjugate-is-refused",
        rules=["memory.layout.conj-neg.inputs"],
        setup=lambda: {"z": _Z.clone().conj()},
        args=["z"],
        program=lambda z: z * 2,
        expect=[Raises(UnsupportedError, rule="memory.layout.conj-neg.inputs", match="input 0")],
        skip={"torch-eager": "eager reads the conjugate"},
    ),
    Case(
        name="ops.complex-views-of-an-input-alias-it-in-the-other-dtype",
        rules=["memory.layout.complex", "ops.aten-views"],
        setup=lambda: {"x": _Z.clone()},
        args=["x"],
        program=lambda x: (torch.view_as_real(x), x.imag),
        expect=[
            Values("out0", [[[1.0, 2.0], [-0.5, 1.0]], [[2.0, -1.0], [0.25, 0.5]]]),
            # a complex64 element is two float32s: sizes, strides and offset count float32s
            Layout("out0", dtype=torch.float32, shape=(2, 2, 2), strides=(4, 2, 1), offset=0),
            Values("out1", [[2.0, 1.0], [-1.0, 0.5]]),
            Layout("out1", dtype=torch.float32, shape=(2, 2), strides=(4, 2), offset=1),
            Shares("x", "out0"),
            Shares("x", "out1"),
        ],
    ),
    Case(
        name="ops.complex-conjugate-view-reads-and-writes-conjugated",
        rules=["memory.layout.conj-neg"],
        setup=lambda: {"x": _Z.clone()},
        args=["x"],
        program=_conjugate_view,
        # y = x.conj() reads x conjugated; y.imag is x's imaginary parts negated; writing 1 + 1j
        # into y[0, 0] stores 1 - 1j in x
        expect=[
            Values("x", [[1.0 - 1.0j, -0.5 + 1.0j], [2.0 - 1.0j, 0.25 + 0.5j]]),
            Values("out0", [[1.0 + 1.0j, -0.5 - 1.0j], [2.0 + 1.0j, 0.25 - 0.5j]]),
            Values("out1", [[1.0, -1.0], [1.0, -0.5]]),
            Shares("x", "out0"),
            Shares("x", "out1"),
        ],
    ),
    Case(
        name="ops.bfloat16-sum-accumulates-in-float32",
        rules=["ops.opmath"],
        # In bfloat16 256 + 1 rounds back to 256; accumulated in float32 the sum is 260.
        setup=lambda: {"x": torch.tensor([256.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.bfloat16)},
        args=["x"],
        program=_bfloat16_sum,
        expect=[
            Values("out0", torch.tensor(260.0, dtype=torch.bfloat16)),
            Layout("out0", dtype=torch.bfloat16, shape=()),
        ],
    ),
    Case(
        name="ops.float-function-of-bool-computes-in-float32",
        rules=["ops.int-to-float"],
        # exp(1) is 2.7182817 in float32; in float16, numpy's promotion of a bool, 2.71875.
        setup=lambda: {"x": torch.tensor([True, False, True])},
        args=["x"],
        program=_exp_and_sigmoid,
        expect=[
            Values("out0", [2.7182817, 1.0, 2.7182817]),
            Layout("out0", dtype=torch.float32, shape=(3,)),
            Values("out1", [0.7310586, 0.5, 0.7310586]),
            Layout("out1", dtype=torch.float32, shape=(3,)),
        ],
    ),
    Case(
        name="ops.fresh-output-with-strides-that-overlap",
        rules=["ops.fresh-output"],
        setup=dict,
        args=[],
        program=_empty_with_a_zero_stride,
        # eager: the zero stride stays, and the storage holds 2*4 + 0*4 + 1*4 + 4 bytes
        expect=[
            Layout("out0", dtype=torch.float32, shape=(5, 5, 5), strides=(2, 0, 1), offset=0),
            StorageBytes("out0", 52),
        ],
    ),
    Case(
        name="ops.clone-keeps-dense-strides",
        rules=["ops.fresh-output"],
        setup=lambda: {"x": torch.arange(6.0).view(2, 3)},
        args=["x"],
        program=_clone_transposed,
        expect=[
            Values("out0", [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]),
            Layout("out0", shape=(3, 2), strides=(1, 3), offset=0),
            Separate("x", "out0"),
        ],
    ),
    Case(
        name="ops.custom-op-runs-opaquely",
        rules=["ops.opaque.schema"],
        setup=lambda: {"x": torch.arange(3.0)},
        args=["x"],
        program=_opaque_program,
        expect=[
            Values("x", [0.0, 3.0, 6.0]),
            Values("out0", [0.0, 6.0, 12.0]),
            Separate("x", "out0"),
        ],
        skip=eager_only("compiled programs reject mutating custom ops (the next case)"),
    ),
    Case(
        name="ops.functional-custom-op",
        rules=["ops.opaque.schema"],
        setup=lambda: {"x": torch.arange(3.0)},
        args=["x"],
        program=_functional_opaque_program,
        expect=[
            Values("x", [0.0, 1.0, 2.0]),
            Values("out0", [1.0, 3.0, 5.0]),
            Separate("x", "out0"),
        ],
    ),
    Case(
        name="ops.std-of-equal-values-over-a-dim-is-zero-and-so-is-its-gradient",
        rules=["ops.aten-values.variance"],
        # 1.7 three times: eager's kernel gives exactly 0 over a dim, where two passes around a
        # float32 mean (5.1000004 / 3) give 1.46e-7, and a gradient near -0.41 through it
        setup=lambda: {"x": torch.full((2, 3), 1.7).requires_grad_()},
        args=["x"],
        program=lambda x: x.std(1),
        backward=True,
        expect=[Values("out0", [0.0, 0.0]), Values("x.grad", torch.zeros(2, 3))],
    ),
    Case(
        name="ops.variance-of-equal-values-over-every-dim-is-eagers-kernels",
        rules=["ops.aten-values.variance"],
        # eager's std of eight 0.1s keeps a residue around its float32 mean (0.10000001), where
        # numpy's sum gives exactly 0.8; its var_mean of seven updates in float64 and gives 0,
        # where two passes around a float32 mean leave 6.5e-17
        setup=lambda: {"eight": torch.full((8,), 0.1), "seven": torch.full((7,), 0.1)},
        args=["eight", "seven"],
        program=lambda eight, seven: (
            eight.std(),
            eight.std() > 0,
            torch.var_mean(seven)[0] > 0,
        ),
        expect=[
            Values("out0", 7.965005544008363e-09),
            Values("out1", True),
            Values("out2", False),
        ],
    ),
    Case(
        name="ops.aten-cumsum-runs-aten",
        rules=["ops.aten-values"],
        setup=lambda: {"x": _M.clone()},
        args=["x"],
        program=_cumsum,
        expect=[
            Values("out0", [[1.0, 2.0, 3.0], [5.0, 7.0, 9.0], [12.0, 15.0, 18.0]]),
            Layout("out0", shape=(3, 3), strides=(3, 1), offset=0),
            Separate("x", "out0"),
        ],
    ),
    Case(
        name="ops.aten-op-without-cpu-kernel-is-refused",
        rules=["ops.aten-values", "boundary.failed-call"],
        setup=lambda: {"x": _M.clone()},
        args=["x"],
        # mm.dtype (a matmul into another dtype) has CUDA kernels only
        program=lambda x: torch.ops.aten.mm.dtype(x.add_(1), x, torch.float32),
        expect=[Raises(UnsupportedError, rule="ops.aten-values", match="aten.mm.dtype")],
        skip={"torch-eager": "eager has no CPU kernel for it either (NotImplementedError)"},
    ),
    Case(
        name="ops.aten-diagonal-is-a-view",
        rules=["ops.aten-views"],
        setup=lambda: {"x": _M.clone()},
        args=["x"],
        program=_double_the_diagonal,
        expect=[
            Values("out0", [2.0, 10.0, 18.0]),
            Values("x", [[2.0, 2.0, 3.0], [4.0, 10.0, 6.0], [7.0, 8.0, 18.0]]),
            Layout("out0", shape=(3,), strides=(4,), offset=0),
            Shares("x", "out0"),
        ],
    ),
    Case(
        name="ops.aten-unsafe-split-returns-views",
        rules=["ops.aten-views"],
        setup=lambda: {"x": _M.clone()},
        args=["x"],
        program=lambda x: torch.ops.aten.unsafe_split(x, 2),
        # eager's outputs share x's storage although the schema does not say so
        expect=[
            Values("out0", _M[:2]),
            Values("out1", _M[2:]),
            Layout("out1", shape=(1, 3), strides=(3, 1), offset=6),
            Shares("x", "out0"),
            Shares("x", "out1"),
        ],
    ),
    Case(
        name="ops.aten-out-argument-is-written-and-returned",
        rules=["ops.aten-mutations"],
        setup=lambda: {"x": _M[0].clone(), "y": torch.zeros(3)},
        args=["x", "y"],
        program=_sin_into,
        expect=[Values("y", torch.sin(_M[0])), Identical("out0", "y"), Values("x", _M[0])],
    ),
    Case(
        name="ops.aten-out-argument-of-another-size-is-refused",
        rules=["ops.aten-mutations"],
        setup=lambda: {"x": _M[0].clone(), "y": torch.zeros(3)},
        args=["x", "y"],
        program=_sin_into_wrong_size,
        expect=[Raises(UnsupportedError, rule="ops.aten-mutations", match="aten.sin.out")],
        skip={"torch-eager": "eager resizes the out= tensor (with a warning)"},
    ),
    Case(
        name="ops.aten-foreach-writes-each-tensor",
        rules=["ops.aten-mutations"],
        setup=lambda: {"a": _M[0].clone(), "b": _M[1:].clone()},
        args=["a", "b"],
        program=_foreach_double,
        expect=[Values("a", _M[0] * 2), Values("b", _M[1:] * 2)],
    ),
    Case(
        name="ops.aten-batch-norm-writes-running-stats",
        rules=["ops.aten-mutations.batch-norm", "ops.aten-derivatives"],
        setup=_batch_norm_world,
        args=_BATCH_NORM_NAMES,
        program=_batch_norm,
        backward=True,
        expect=[
            Values(name, _BATCH_NORM[name])
            for name in [
                "out0",
                "running_mean",
                "running_var",
                "x.grad",
                "weight.grad",
                "bias.grad",
            ]
        ],
    ),
    Case(
        name="ops.aten-conv-saves-what-eager-saves",
        rules=["ops.aten-derivatives", "hooks.eager.saved-set"],
        setup=_conv_world,
        args=["x", "w"],
        program=_conv,
        hooks=(_pack_bf16, _unpack_f32),
        hooks_filter="all",
        backward=True,
        # convolution saves its input (x * 2) and its weight: both go through the lossy hooks,
        # as in eager, so both gradients are eager's rounded ones.
        expect=[Values(name, _CONV[name]) for name in ["out0", "x.grad", "w.grad"]],
    ),
    Case(
        name="ops.aten-lstm-workspace-reaches-the-backward",
        rules=["ops.aten-values.grad-mode", "ops.aten-values.workspace", "ops.aten-derivatives"],
        setup=_lstm_world,
        args=_LSTM_NAMES,
        # called under torch.no_grad(): the forward's kernel runs with grad mode on all the same
        program=_lstm_with_grad,
        grad_enabled=False,
        backward=True,
        expect=[Values(name, _LSTM[name]) for name in ["out0", *_LSTM_NAMES[3:]]]
        + [Values(f"{name}.grad", _LSTM[f"{name}.grad"]) for name in _LSTM_NAMES[3:]],
    ),
    Case(
        name="ops.aten-device-only-kernels-are-not-picked",
        rules=["ops.aten-values.device-choices", "ops.aten-values"],
        setup=_device_choices_world,
        args=_DEVICE_CHOICES_NAMES,
        program=_device_choices,
        backward=True,
        # eager's values and gradients (on CPU; within tolerance of eager's on CUDA, whose cuDNN
        # and fused attention kernels round otherwise)
        expect=[Values("out0", _DEVICE_CHOICES["out0"])]
        + [
            Values(f"{name}.grad", _DEVICE_CHOICES[f"{name}.grad"])
            for name in ["x", "w_ih", "w_hh", "b_ih", "b_hh", "q", "scale", "shift"]
        ],
        skip={
            "reference-eager": "the eager interpreter counts versions per storage: a GRU cell's "
            "in-place sigmoid_ on one chunk of unsafe_split fails the check of a sibling chunk "
            "(eager's chunks, not views for autograd, count apart); issue 23"
        },
    ),
    Case(
        name="ops.aten-norm-gradients-write-nothing",
        rules=[
            "ops.aten-derivatives.functional",
            "ops.aten-mutations.original-self",
            "ops.aten-derivatives",
        ],
        setup=_norms_world,
        args=["x", "y"],
        program=_norms,
        backward=True,
        # eager's formulas write masked_fill_ into quotients they made; the values are eager's,
        # a zero gradient for the zero row's norm included
        expect=[Values(name, _NORMS[name]) for name in ["out0", "x.grad", "y.grad"]],
    ),
    Case(
        name="ops.aten-loss-backward-of-a-transposed-view-keeps-the-meta-layout",
        rules=["ops.fresh-output.meta-layout", "ops.aten-derivatives"],
        setup=_transposed_losses_world,
        args=["x", "w", "target"],
        program=_transposed_losses,
        backward=True,
        # the losses' and activations' backward kernels return contiguous gradients where their
        # meta kernels keep h's transposed order; the backward then views the gradient back as
        # the matmul's rows
        expect=[Values(name, _TRANSPOSED_LOSSES[name]) for name in ["out0", "x.grad", "w.grad"]],
    ),
    Case(
        name="ops.aten-loss-mean-has-a-storage-of-its-own",
        rules=["ops.fresh-output.meta-layout"],
        setup=lambda: {"x": _M.clone(), "target": _M.flip(0).clone()},
        args=["x", "target"],
        program=_mean_squared,
        # one float32, as the meta kernel says; (2x - flip(x))^2 averaged over the 9 terms
        expect=[
            StorageBytes("out0", 4),
            Values("out0", ((_M * 2 - _M.flip(0)) ** 2).mean()),
        ],
        skip={"torch-eager": "eager's kernel returns the mean on a storage of its 9 terms (36 B)"},
    ),
    Case(
        name="ops.aten-loss-sum-has-a-storage-of-its-own",
        rules=["ops.fresh-output.meta-layout"],
        setup=lambda: {"x": _M.clone(), "target": _M.flip(0).clone()},
        args=["x", "target"],
        program=_summed_smooth_l1,
        # one float32, as the meta kernel says; the smooth L1 terms of 2x - flip(x), summed
        expect=[
            StorageBytes("out0", 4),
            Values("out0", F.smooth_l1_loss(_M * 2, _M.flip(0), reduction="sum")),
        ],
        skip={"torch-eager": "eager's kernel returns the sum on a storage of its 9 terms (36 B)"},
    ),
    Case(
        name="ops.functional-copy-has-a-clone-of-its-arguments-storage",
        rules=["ops.fresh-output.cloned-storage"],
        setup=lambda: {"x": torch.arange(4.0), "y": torch.tensor([5.0, 6.0])},
        args=["x", "y"],
        program=_functional_copy_into_every_other,
        # laid out as x[::2]; on a clone of x's 4 float32 (16 B), where its extent is 3 (12 B)
        expect=[
            Values("out0", [5.0, 6.0]),
            Layout("out0", shape=(2,), strides=(2,), offset=0),
            StorageBytes("out0", 16),
            Separate("x", "out0"),
            Values("x", [0.0, 1.0, 2.0, 3.0]),
        ],
    ),
    Case(
        name="ops.as-strided-scatter-writes-the-clone-of-the-storage",
        rules=["ops.fresh-output.cloned-storage"],
        setup=lambda: {"x": torch.arange(4.0), "y": torch.tensor([5.0])},
        args=["x", "y"],
        program=_scatter_into_the_gap,
        # eager: the result reads the clone of x's storage as x[::2] does, and the 5 lands in a
        # byte of the clone the view does not read (storage [0, 5, 2, 3]): the result's values
        # are the argument's
        expect=[
            Values("out0", [0.0, 2.0]),
            Layout("out0", shape=(2,), strides=(2,), offset=0),
            StorageBytes("out0", 16),
            Values("x", [0.0, 1.0, 2.0, 3.0]),
        ],
    ),
    Case(
        name="ops.as-strided-scatter-before-an-offset-view-keeps-its-values",
        rules=["ops.fresh-output.cloned-storage", "ops.fresh-output.meta-layout"],
        setup=lambda: {"x": torch.arange(4.0), "y": torch.tensor([5.0])},
        args=["x", "y"],
        program=_scatter_before_the_view,
        # eager: the 5 lands in the clone's first element, which x[1:3] does not read: the
        # result's values are the argument's
        # (the traced meta value starts at offset 0, the kernel's result at 1: the values stay)
        expect=[
            Values("out0", [1.0, 2.0]),
            StorageBytes("out0", 16),
            Values("x", [0.0, 1.0, 2.0, 3.0]),
        ],
    ),
    Case(
        name="ops.as-strided-scatter-has-a-clone-of-its-arguments-storage",
        rules=["ops.fresh-output.cloned-storage"],
        setup=lambda: {"x": torch.arange(4.0), "y": torch.tensor([5.0, 6.0])},
        args=["x", "y"],
        program=_scatter_into_nothing,
        # no element, on a clone of x's 4 float32 (16 B), where its extent is 0 B
        expect=[
            Layout("out0", shape=(0,)),
            StorageBytes("out0", 16),
            Separate("x", "out0"),
            Values("x", [0.0, 1.0, 2.0, 3.0]),
        ],
    ),
    Case(
        name="ops.random-draws-from-the-callers-generator-in-order",
        rules=["ops.random", "ops.aten-mutations", "ops.random.generator-capture"],
        setup=_draw_world,
        args=["x", "generator"],
        program=_draws,
        expect=_where_generators_trace(
            [Values("out0", _DRAWS[0]), Values("out1", _DRAWS[1]), Values("x", _DRAWS[2])]
        ),
        skip=_GENERATOR_SKIP,
    ),
    Case(
        name="ops.random-bernoulli-fills-a-transposed-tensor-as-eager",
        rules=["ops.random", "ops.random.generator-capture"],
        setup=_transposed_draw_world,
        args=["x", "generator"],
        program=_bernoulli_into,
        # eager draws in the order of x's memory: column by column of x
        expect=_where_generators_trace(
            [Values("x", _TRANSPOSED_DRAW), Layout("x", shape=(6, 4), strides=(1, 6))]
        ),
        skip=_GENERATOR_SKIP,
    ),
    Case(
        name="ops.random-dropout-draws-as-eager-after-an-unused-draw",
        rules=["ops.random", "ops.aten-derivatives"],
        setup=lambda: _seeded(torch.ones(2, 5)),
        args=["x"],
        program=_dropout_after_an_unused_draw,
        backward=True,
        expect=[Values("out0", _DROPOUT["out0"]), Values("x.grad", _DROPOUT["x.grad"])],
    ),
    Case(
        name="ops.aten-rrelu-backward-reads-the-noise-it-drew",
        rules=["ops.aten-mutations.state", "ops.random"],
        setup=_rrelu_world,
        args=["x"],
        program=_rrelu,
        backward=True,
        # the gradient is the noise: the drawn slope where x < 0, 1 where x >= 0
        expect=[Values("out0", _RRELU["out0"]), Values("x.grad", _RRELU["x.grad"])],
    ),
    Case(
        name="ops.aten-batch-norm-with-update-backward-reads-the-updated-statistics",
        rules=["ops.aten-mutations.state", "ops.aten-mutations"],
        setup=_batch_norm_world,
        args=_BATCH_NORM_NAMES,
        program=_batch_norm_with_update,
        backward=True,
        expect=[
            Values(name, _BATCH_NORM_WITH_UPDATE[name])
            for name in ["out0", "running_mean", "running_var", "x.grad", "weight.grad"]
        ],
    ),
    Case(
        name="ops.aten-batch-norm-in-eval-writes-nothing",
        rules=["ops.aten-mutations.batch-norm", "autograd.saved-inputs.version"],
        setup=_batch_norm_world,
        args=_BATCH_NORM_NAMES,
        program=_batch_norm_in_eval,
        backward=True,
        # the running statistics stay zeros and ones, and the backward reads them
        expect=[
            Values(name, _BATCH_NORM_IN_EVAL[name])
            for name in ["out0", "running_mean", "running_var", "x.grad", "weight.grad"]
        ],
    ),
    Case(
        name="ops.aten-batch-norm-statistics-keep-their-versions",
        rules=["ops.aten-mutations.versions", "autograd.saved-inputs"],
        setup=_batch_norm_world,
        args=_BATCH_NORM_NAMES,
        program=_statistics_read_then_updated,
        backward=True,
        # eager's batch norm updates the statistics without advancing their versions, so the
        # backward passes its check and reads the updated running_mean for weight's gradient
        expect=[
            *[
                Values(name, _STATISTICS_READ[name])
                for name in ["out0", "running_mean", "running_var", "x.grad", "weight.grad"]
            ],
            Version("running_mean", _STATISTICS_READ["running_mean"]._version),
            Version("running_var", _STATISTICS_READ["running_var"]._version),
        ],
    ),
    Case(
        name="ops.aten-rrelu-noise-keeps-its-version",
        rules=["ops.aten-mutations.versions", "ops.aten-mutations.state"],
        setup=_rrelu_noise_world,
        args=["x", "noise"],
        program=_rrelu_into_noise,
        backward=True,
        expect=[
            *[Values(name, _RRELU_NOISE[name]) for name in ["out0", "noise", "x.grad"]],
            Version("noise", _RRELU_NOISE["noise"]._version),
        ],
    ),
    Case(
        name="ops.aten-observer-resizes-empty-per-channel-state",
        rules=[
            "ops.aten-mutations.observer-state",
            "aliasing.resize.grows-storage",
            "autograd.metadata.as-strided",
        ],
        setup=_observer_world,
        args=_OBSERVER_NAMES,
        program=_observe_per_channel,
        backward=True,
        # eager: each state tensor becomes one element per row of x (2): running_min's storage
        # grows from 0 bytes, scale's from 4 to 8; every value is written by the kernel, and
        # none carries a gradient, so they may be relaid out while x requires grad. x.grad is
        # the fake quantization's mask: all ones, the first observation being x's own range
        expect=[Values(name, _OBSERVER[name]) for name in ["out0", "x.grad", *_OBSERVER_NAMES[1:]]]
        + [Layout(name, shape=(2,), strides=(1,), offset=0) for name in _OBSERVER_NAMES[1:]]
        + [StorageBytes("running_min", 8), StorageBytes("scale", 8)],
    ),
    Case(
        name="ops.aten-observer-per-tensor-with-empty-state-is-refused",
        rules=["ops.aten-mutations.observer-state"],
        setup=_observer_world,
        args=_OBSERVER_NAMES,
        program=_observe_per_tensor,
        expect=[Raises(UnsupportedError, rule="ops.aten-mutations.observer-state")],
        skip={"torch-eager": "eager's kernel reads past the empty state (a segfault)"},
    ),
    Case(
        name="ops.aten-derivative-writing-into-a-view-of-its-zeros",
        rules=["ops.aten-derivatives.functional"],
        setup=lambda: {"x": torch.arange(4.0).requires_grad_()},
        args=["x"],
        program=_every_other_weighted,
        backward=True,
        # out = [x[1] * 1, x[3] * 2]: eager's formula copies [1, 2] into elements 1 and 3 of zeros
        expect=[Values("out0", [1.0, 6.0]), Values("x.grad", [0.0, 1.0, 0.0, 2.0])],
    ),
    Case(
        name="ops.as-strided-scatter-gives-the-overwritten-window-no-gradient",
        rules=["ops.as-strided-scatter.derivative"],
        setup=_scatter_world,
        args=["x", "src"],
        program=_scatter_every_other,
        backward=True,
        # eager's write through the window: x.grad [1, 0, 3, 0], src.grad [2, 4]
        expect=[Values(n, _WRITE_EVERY_OTHER[n]) for n in ["out0", "x.grad", "src.grad"]],
        skip={"torch-eager": "eager's formula gives x the gradient inside the window instead"},
    ),
    Case(
        name="ops.aten-derivative-filling-a-diagonal",
        rules=["ops.aten-derivatives.functional"],
        setup=_svd_world,
        args=["b"],
        program=_svd_rebuilt,
        backward=True,
        # U diag(S) Vh is b again, so the gradient of its sum is ones (eager's, rounded);
        # svd's formula fills the diagonal of its 1 / (s_j^2 - s_i^2) denominators with 1
        expect=[Values("out0", _SVD["out0"]), Values("b.grad", _SVD["b.grad"])],
    ),
    Case(
        name="ops.aten-derivative-halving-a-diagonal",
        rules=["ops.aten-derivatives.functional"],
        setup=_qr_world,
        args=["a"],
        program=_qr_rebuilt,
        backward=True,
        # linalg_qr's formula halves the diagonal of a symmetric matrix with mul_
        expect=[Values("out0", _QR["out0"]), Values("a.grad", _QR["a.grad"])],
    ),
    Case(
        name="ops.index-put-at-a-mask-gradient-of-values",
        rules=["ops.derivatives.index-put-mask"],
        setup=lambda: {
            "x": torch.ones(3, 2, requires_grad=True),
            "mask": torch.tensor([True, False, True]),
            "values": torch.tensor([10.0, 20.0], requires_grad=True),
        },
        args=["x", "mask", "values"],
        program=_put_rows_at_a_mask,
        backward=True,
        # eager: rows 0 and 2 get the values, so x's gradient is the weights of row 1 alone and
        # the values' the weights of rows 0 and 2 summed: [1 + 16, 2 + 32]
        expect=[
            Values("out0", [[10.0, 40.0], [4.0, 8.0], [160.0, 640.0]]),
            Values("x.grad", [[0.0, 0.0], [4.0, 8.0], [0.0, 0.0]]),
            Values("values.grad", [17.0, 34.0]),
        ],
    ),
    Case(
        name="ops.index-fill-gradient-of-the-value-counts-each-position-once",
        rules=["ops.derivatives.index-fill-value"],
        setup=lambda: {
            "x": torch.ones(3, 2, requires_grad=True),
            "index": torch.tensor([2, 0, 2]),
            "value": torch.tensor(5.0, requires_grad=True),
        },
        args=["x", "index", "value"],
        program=_fill_rows_with_a_value,
        backward=True,
        # eager: rows 0 and 2 are filled (row 2 named twice, summed once): the value's gradient
        # is 1 + 2 + 16 + 32 = 51, x's the weights of row 1 alone
        expect=[
            Values("out0", [[5.0, 10.0], [4.0, 8.0], [80.0, 160.0]]),
            Values("x.grad", [[0.0, 0.0], [4.0, 8.0], [0.0, 0.0]]),
            Values("value.grad", torch.tensor(51.0)),
        ],
    ),
]


def _bags_summed_sparse(w, x, offsets):
    return F.embedding_bag(x, w, offsets, mode="sum", sparse=True)


def _bags_summed_sparse_twice(w, x, offsets):
    return _bags_summed_sparse(w, x, offsets) + _bags_summed_sparse(w, x.flip(0), offsets)


def _embedding_table():
    return {
        "w": torch.arange(20.0).view(10, 2).requires_grad_(),
        "x": torch.tensor([1, 5, 1, 7]),
        "offsets": torch.tensor([0, 2]),
    }


CASES += [
    Case(
        name="ops.embedding-bag-sparse-weight-gradient",
        rules=["ops.aten-values.sparse-gradient", "ops.aten-values"],
        setup=_embedding_table,
        args=["w", "x", "offsets"],
        program=_bags_summed_sparse,
        backward=True,
        # eager: bags {1, 5} and {1, 7} of rows [2k, 2k + 1]; w.grad is sparse, a row of ones
        # per index, [[1, 5, 1, 7]], which coalesced is row 1 twice, rows 5 and 7 once
        expect=[
            Values("out0", [[12.0, 14.0], [16.0, 18.0]]),
            SparseValues("w.grad", (10, 2), [[1, 5, 7]], [[2.0, 2.0], [1.0, 1.0], [1.0, 1.0]]),
        ],
    ),
    Case(
        name="ops.sparse-gradients-of-one-weight-summed",
        rules=["ops.aten-values.sparse-gradient"],
        setup=_embedding_table,
        args=["w", "x", "offsets"],
        program=_bags_summed_sparse_twice,
        backward=True,
        # eager: bags {1, 5}, {1, 7}, then {7, 1}, {5, 1}: each output row is 2 w1 + w5 + w7;
        # w.grad, coalesced, counts row 1 four times, rows 5 and 7 twice
        expect=[
            Values("out0", [[28.0, 32.0], [28.0, 32.0]]),
            SparseValues("w.grad", (10, 2), [[1, 5, 7]], [[4.0, 4.0], [2.0, 2.0], [2.0, 2.0]]),
        ],
    ),
]


def _views_of_likes_of_nothing(x):
    return (
        torch.zeros_like(x)[1:],
        torch.rand_like(x).split(1)[2],
        torch.full_like(x, 3.0).narrow(0, 2, 1),
        torch.randint_like(x, 4).t()[:, 1:],
    )


CASES.append(
    Case(
        name="ops.like-of-nothing-keeps-its-strides",
        rules=["ops.fresh-output.like-empty", "memory.layout.unaddressed-strides"],
        setup=lambda: {"x": torch.zeros(3, 2)[:, :0]},
        args=["x"],
        program=_views_of_likes_of_nothing,
        # eager: each result has x's strides (2, 1), so the views start at 1 * 2, 2 * 2, 2 * 2
        # and, through the transpose, 1 * 2 (the fake kernels' strides (1, 1) gave 1, 2, 2, 1)
        expect=[
            Layout("out0", dtype=torch.float32, shape=(2, 0), offset=2),
            Layout("out1", dtype=torch.float32, shape=(1, 0), offset=4),
            Layout("out2", dtype=torch.float32, shape=(1, 0), offset=4),
            Layout("out3", dtype=torch.float32, shape=(0, 2), offset=2),
            StorageBytes("out0", 0),
        ],
    )
)
