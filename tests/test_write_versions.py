"""r[ops.aten-mutations.versions]: which writes of an op advance its arguments' version counters.

Each program runs one op that writes arguments, in eager and on aotspec (its eager interpreter and
both backends' compiled calls), each on fresh arguments; every argument's version counter and
values afterwards must be eager's. The ops are those the rule names, on both sides of it: an
argument the op returns, the lists a `_foreach_` op writes, and writes eager's kernels make
without advancing a counter (batch norm's running statistics, rrelu's noise, observer state).
"""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree

import aotspec
from aotspec.reference import run

aten = torch.ops.aten


def _images():
    return torch.linspace(-2.0, 3.0, 24).reshape(4, 3, 2)


def _statistics():
    return {"running_mean": torch.zeros(3), "running_var": torch.ones(3)}


def _batch_norm_args():
    return {"x": _images(), "weight": torch.ones(3), "bias": torch.zeros(3), **_statistics()}


def _native_batch_norm(x, weight, bias, running_mean, running_var):
    return aten.native_batch_norm(x, weight, bias, running_mean, running_var, True, 0.25, 1e-5)


def _legit_batch_norm(x, weight, bias, running_mean, running_var):
    args = (x, weight, bias, running_mean, running_var)
    return aten._native_batch_norm_legit(*args, True, 0.25, 1e-5)


def _batch_norm_with_update(x, weight, bias, running_mean, running_var):
    args = (x, weight, bias, running_mean, running_var)
    return aten._batch_norm_with_update(*args, 0.25, 1e-5)


def _module_batch_norm(x, weight, bias, running_mean, running_var):
    return torch.nn.functional.batch_norm(x, running_mean, running_var, weight, bias, True, 0.25)


def _rrelu_args():
    return {"x": torch.linspace(-3.0, 2.0, 6), "noise": torch.zeros(6)}


def _rrelu_with_noise(x, noise):
    return aten.rrelu_with_noise(x, noise, 0.5, 0.5, True)  # a fixed slope: no draw


def _rrelu_with_noise_(x, noise):
    return aten.rrelu_with_noise_(x, noise, 0.5, 0.5, True)


def _scale_args():
    return {
        "scale": torch.tensor([4.0]),
        "growth_tracker": torch.tensor([1], dtype=torch.int32),
        "found_inf": torch.tensor([0.0]),
    }


def _amp_update_scale_(scale, growth_tracker, found_inf):
    return aten._amp_update_scale_(scale, growth_tracker, found_inf, 2.0, 0.5, 2)


def _pair():
    return {"a": torch.linspace(-1.0, 1.0, 4), "b": torch.linspace(2.0, -2.0, 4)}


def _foreach_add_(a, b):
    torch._foreach_add_([a, b], 1.0)


def _foreach_clamp_min_out(a, b):
    aten._foreach_clamp_min.Scalar_out([a], 0.0, out=[b])


def _sin_out(a, b):
    return torch.sin(a, out=b)


def _observer_args():
    return {
        "x": torch.linspace(-1.0, 1.0, 6).reshape(2, 3),
        "running_min": torch.full((1,), float("inf")),
        "running_max": torch.full((1,), float("-inf")),
        "scale": torch.ones(1),
        "zero_point": torch.zeros(1, dtype=torch.int32),
    }


def _observer(x, running_min, running_max, scale, zero_point):
    on = torch.ones(1, dtype=torch.long)
    state = (running_min, running_max, scale, zero_point)
    return aten._fused_moving_avg_obs_fq_helper(x, on, on, *state, 0.01, 0, 255, 0)


PROGRAMS = {
    "native_batch_norm": (_native_batch_norm, _batch_norm_args),
    "_native_batch_norm_legit": (_legit_batch_norm, _batch_norm_args),
    "_batch_norm_with_update": (_batch_norm_with_update, _batch_norm_args),
    "F.batch_norm": (_module_batch_norm, _batch_norm_args),
    "rrelu_with_noise": (_rrelu_with_noise, _rrelu_args),
    "rrelu_with_noise_": (_rrelu_with_noise_, _rrelu_args),
    "_amp_update_scale_": (_amp_update_scale_, _scale_args),
    "_foreach_add_": (_foreach_add_, _pair),
    "_foreach_clamp_min.Scalar_out": (_foreach_clamp_min_out, _pair),
    "sin.out": (_sin_out, _pair),
    "_fused_moving_avg_obs_fq_helper": (_observer, _observer_args),
}


def _eager_interpreter(fn, *args):
    return run(fn, *args).outputs


def _compiled(backend: str):
    return lambda fn, *args: aotspec.compile(fn, backend=backend)(*args)


RUNNERS = {
    "eager-interpreter": _eager_interpreter,
    "reference": _compiled("reference"),
    "fast": _compiled("fast"),
}


def _after(fn, make_args, runner):
    """The arguments' versions and values after the call, and the outputs."""
    arguments = make_args()
    outputs = runner(fn, *arguments.values())
    versions = {name: t._version for name, t in arguments.items()}
    return versions, arguments, [o for o in pytree.tree_leaves(outputs) if o is not None]


@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_versions_after_a_write_are_eagers(program, runner):
    fn, make_args = PROGRAMS[program]
    expected = _after(fn, make_args, lambda fn, *args: fn(*args))
    actual = _after(fn, make_args, RUNNERS[runner])
    assert expected[0] == actual[0], f"{program} on {runner}: versions"
    torch.testing.assert_close(actual[1:], expected[1:], msg=lambda m: f"{program}: {m}")


def test_the_rule_leaves_some_versions_alone_and_advances_others():
    """The programs above cover both sides of the rule in eager itself, so the test above
    compares something: some written arguments keep their versions, others advance."""
    kept, advanced = set(), set()
    for program, (fn, make_args) in PROGRAMS.items():
        versions, _, _ = _after(fn, make_args, lambda fn, *args: fn(*args))
        kept.update(f"{program}:{name}" for name, v in versions.items() if v == 0)
        advanced.update(f"{program}:{name}" for name, v in versions.items() if v > 0)
    assert {"native_batch_norm:running_mean", "rrelu_with_noise:noise"} <= kept
    assert {"_amp_update_scale_:growth_tracker", "rrelu_with_noise_:noise"} <= kept
    assert {"_amp_update_scale_:scale", "_foreach_add_:a", "sin.out:b"} <= advanced
    assert {"rrelu_with_noise_:x", "_foreach_clamp_min.Scalar_out:b"} <= advanced
