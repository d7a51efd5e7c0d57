"""What the cases of several autograd sections share: the seeded tensors, leaves, worlds and
programs more than one of `autograd.py`, `autograd_custom_functions.py`,
`autograd_input_writes.py`, `autograd_metadata.py`, `checkpoint.py` and the cases of other chapters
moved out of them use.

The tensors are drawn here, in one place, so that each keeps the values it was drawn with.
"""

import torch

torch.manual_seed(0)
_X, _W1, _W2 = torch.randn(5, 4), torch.randn(8, 4), torch.randn(3, 8)


def _leaves(**tensors):
    return {name: t.clone().requires_grad_() for name, t in tensors.items()}


#: Skip entries for cases that write a caller's tensor with history (`r[autograd.input-writes]`).
_EAGER_INTERPRETER_KEEPS_HISTORIES = {
    "reference-eager": "the eager interpreter does not rebase a caller's history "
    "(autograd.mutated-grad-input)"
}


def _non_leaf_world():
    x = torch.arange(3.0, requires_grad=True)
    return {"x": x, "y": x * 2, "z": torch.ones(3, requires_grad=True)}


_resize = torch.ops.inductor.resize_storage_bytes_
_G = torch.randn(4, 4)


def _fsdp_layer(x, w, gathered):
    """FSDP's forward for one layer: all-gather into the parameter's storage, use, reshard."""
    _resize(w, gathered.numel() * gathered.element_size())
    with torch.no_grad():
        w.copy_(gathered)
    y = x @ w
    _resize(w, 0)
    return y


def _sharded_world():
    w = torch.nn.Parameter(torch.empty(4, 4))
    w.untyped_storage().resize_(0)  # sharded: the parameter holds no bytes between uses
    return {"x": _X[:2].clone().requires_grad_(), "w": w, "gathered": _G.clone()}


def _regather(world):
    """FSDP's pre-backward all-gather, which leaves the version alone."""
    w = world["w"]
    w.untyped_storage().resize_(_G.numel() * _G.element_size())
    with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(w):
        w.copy_(_G)


def _eager_grads(program, world, before_backward=None) -> dict[str, torch.Tensor]:
    """Eager PyTorch's outputs and gradients of `program` on a private world."""
    out = program(world["x"], *[world[k] for k in ("w", "gathered") if k in world])
    if before_backward is not None:
        before_backward(world)
    out.sum().backward()
    return {
        "out0": out.detach(),
        "x.grad": world["x"].grad,
        "w.grad": world["w"].grad,
        "w": world["w"].detach(),
    }


def _x_w_world():
    return {"x": _X[:2].clone().requires_grad_(), "w": _G.clone().requires_grad_()}


_FSDP = _eager_grads(_fsdp_layer, _sharded_world(), _regather)


def _aliased_views_world(made_without_grad=False):
    p = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    x = p * 1
    with torch.set_grad_enabled(not made_without_grad):
        return {"p": p, "x": x, "v": x.view(-1), "m": x.view(2, 2)}


def _two_non_leaves_world():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = torch.tensor([4.0, 5.0, 6.0], requires_grad=True)
    return {"x": x, "w": w, "a": x * 1, "b": w * 1}


_ANGLES = torch.tensor([0.0, 0.5, 1.0, 1.5])


def _caller_writes_w(world):
    world["w"].add_(1)


_W32 = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])


def _non_leaf_and_weight():
    p = torch.arange(6.0).reshape(2, 3).requires_grad_()
    return {"p": p, "x": p * 1, "w": _W32.clone().requires_grad_()}
