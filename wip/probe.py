import torch, traceback
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic, StatelessSymbolicContext
from aotspec.reference import pipeline
from torch.fx.experimental.proxy_tensor import make_fx
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
head = torch.nn.Linear(32, 10)
emb = torch.nn.Embedding(50, 32)
params = [*emb.parameters(), *layer.parameters(), *head.parameters()]
from torch.func import functional_call
def step(tokens, *ps):
    x = torch.nn.functional.embedding(tokens, ps[0])
    # simple: mlp-ish
    y = torch.nn.functional.linear(x, ps[-2], ps[-1])
    return y.sum(dim=1).square().mean()

shape_env = ShapeEnv()
mode = FakeTensorMode(shape_env=shape_env)
tokens = torch.randint(0, 50, (4, 9))
def fake(t, dyn):
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC if d in dyn else DimDynamic.STATIC for d in range(t.dim())])
    return mode.from_tensor(t, symbolic_context=ctx)
tensors = [fake(tokens, {1})] + [mode.from_tensor(p) for p in params]
print(tensors[0].shape)
try:
    plan = pipeline.build_plan(step, tuple(tensors), {}, tensors, frozenset(), None)
    print(plan.functional.graph_module.code)
    print(plan.differentiated.forward.code if hasattr(plan.differentiated.forward,'code') else plan.differentiated)
except Exception as e:
    traceback.print_exc()
    if e.__context__ is not None: traceback.print_exception(e.__context__)
print(shape_env.guards)
