import torch, traceback, sys
#exec(open("/tmp/sym/guardtrace.py").read())
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, StatelessSymbolicContext, DimDynamic
from aotspec.reference.pipeline import build_plan

def sym_fake(mode, t, dyn):
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC if i in dyn else DimDynamic.STATIC for i in range(t.dim())])
    f = mode.from_tensor(t, symbolic_context=ctx)
    if t.requires_grad: f.requires_grad_()
    return f

torch.manual_seed(0)
class M(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = torch.nn.Embedding(50, 32)
        s.enc = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=float(sys.argv[1]) if len(sys.argv)>1 else 0.1)
        s.head = torch.nn.Linear(32, 50)
    def forward(s, x):
        return s.head(s.enc(s.emb(x)))
m = M()
names = [n for n, _ in m.named_parameters()]
def fn(params, x, y):
    out = torch.func.functional_call(m, dict(zip(names, params)), (x,))
    return torch.nn.functional.cross_entropy(out.reshape(-1, 50), y.reshape(-1)),

mode = FakeTensorMode(shape_env=ShapeEnv())
x = torch.randint(0, 50, (4, 9)); y = torch.randint(0, 50, (4, 9))
params = [p for p in m.parameters()]
tensors = [sym_fake(mode, p, set()) for p in params] + [sym_fake(mode, x, {1}), sym_fake(mode, y, {1})]
print(tensors[-1].shape)
args = (tensors[:len(params)], tensors[-2], tensors[-1])
try:
    plan = build_plan(fn, args, {}, tensors, frozenset(), None)
except Exception:
    traceback.print_exc(); sys.exit()
d = plan.differentiated
print(d.forward.graph_module.code)
print(d.backward.graph_module.code)
print(d.tangent_strides, d.read_after_call)
print(mode.shape_env.guards)
from aotspec.reference.compiled import run_compiled
import copy
for L in (9, 12, 5):
    torch.manual_seed(1)
    x = torch.randint(0, 50, (4, L)); y = torch.randint(0, 50, (4, L))
    ps = [p.detach().clone().requires_grad_() for p in params]
    try:
        torch.manual_seed(2); run = run_compiled(plan, [*ps, x, y]); out = run.outputs[0]; out.backward()
    except Exception:
        traceback.print_exc(); break
    pe = [p.detach().clone().requires_grad_() for p in params]
    torch.manual_seed(2); ref = fn(pe, x, y)[0]; ref.backward()
    print(L, float(out), float(ref), all(torch.allclose(a.grad, b.grad, atol=1e-5) for a, b in zip(ps, pe)))
