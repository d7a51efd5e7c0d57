import torch, traceback
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, StatelessSymbolicContext, DimDynamic
from aotspec.reference.pipeline import build_plan

def sym_fake(mode, t, dyn):
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC if i in dyn else DimDynamic.STATIC for i in range(t.dim())])
    f = mode.from_tensor(t, symbolic_context=ctx)
    return f

lin = torch.nn.Linear(8, 4)
def fn(x, w, b):
    return (torch.relu(x @ w.t() + b) * 2).sum(),

mode = FakeTensorMode(shape_env=ShapeEnv())
x = torch.randn(5, 8)
w = lin.weight.detach().requires_grad_(); b = lin.bias.detach().requires_grad_()
tensors = [sym_fake(mode, x, {0}), sym_fake(mode, w, set()), sym_fake(mode, b, set())]
tensors[1].requires_grad_(); tensors[2].requires_grad_()
print(tensors[0].shape)
try:
    plan = build_plan(fn, tuple(tensors), {}, tensors, frozenset(), None)
    print(plan.functional.graph_module.code)
    print(plan.differentiated.forward)
except Exception:
    traceback.print_exc()
d = plan.differentiated
print(d.forward.graph_module.code)
print(d.backward.graph_module.code)
print(d.tangent_strides, d.read_after_call)
print(mode.shape_env.guards)
from aotspec.reference.compiled import run_compiled
for n in (5, 7, 3):
    x = torch.randn(n, 8)
    wr = lin.weight.detach().clone().requires_grad_(); br = lin.bias.detach().clone().requires_grad_()
    try:
        run = run_compiled(plan, [x, wr, br])
        out = run.outputs[0]
        out.backward()
    except Exception:
        traceback.print_exc(); break
    we = lin.weight.detach().clone().requires_grad_(); be = lin.bias.detach().clone().requires_grad_()
    ref = fn(x, we, be)[0]; ref.backward()
    print(n, float(out), float(ref), torch.allclose(wr.grad, we.grad), torch.allclose(br.grad, be.grad), run.ledger.peak if hasattr(run.ledger,'peak') else None)
