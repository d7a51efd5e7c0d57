"""aotspec fuzz repro: torch.compile:aot_eager disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:aot_eager --seed 0` (program 2, a grad program).
Signature: error AssertionError: expected a function variable, got <class 'torch._dynamo.variables.lazy.L
Run alone, from anywhere aotspec is installed:
    python repro_error_assertionerror_expected_a_function_54b7c3__torch_compile_aot_eager.py                  fails: torch.compile:aot_eager is wrong here
    python repro_error_assertionerror_expected_a_function_54b7c3__torch_compile_aot_eager.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised AssertionError: expected a function variable, got <class 'torch._dynamo.variables.lazy.LazyVariableTracker'> from user code:
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:aot_eager'
SUBJECT = pickle.loads(base64.b64decode('gASVvQIAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksDhpSMBnZhbHVlc5QoRz/wAAAAAAAARz/wAAAAAAAARz/wAAAAAAAARz/wAAAAAAAAR7/wAAAAAAAAR0AAAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklIiMCG5vbl9sZWFmlImMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXVihZSMBXZpZXdzlGgAjApDYWxsZXJWaWV3lJOUKYGUfZQoaA+MAmEwlIwEYmFzZZSMAmIwlIwFc2l6ZXOUSwFLBoaUjAdzdHJpZGVzlEsGSwGGlIwGb2Zmc2V0lEsAjAhkZXRhY2hlZJSJdWKFlIwEYXJnc5SMAmIwlGghhpR1YowEYm9keZQoaACMBUluc3RylJOUKYGUfZQojAJvcJSMAXSUjARvdXRzlIwCdjCUhZRoK2gAjANWYXKUk5QpgZR9lGgPjAJ4MJRzYoWUdWJoMCmBlH2UKGgzjAJtbZRoNYwCdjGUhZRoK2g5KYGUfZRoD2g8c2JoOSmBlH2UaA9oNnNihpR1YmgwKYGUfZQoaDOMCXVuc3F1ZWV6ZZRoNYwCdjKUhZRoK2g5KYGUfZRoD2g8c2JLAoaUdWJoMCmBlH2UKGgzjA9lbmFibGVfZ3JhZF9tdWyUaDWMAnYzlIWUaCtoOSmBlH2UaA9oPHNiR0AAAAAAAAAAhpR1YnSUjAdyZXR1cm5zlGhThZSMDGdyYWRfZW5hYmxlZJSJjAxyZXRhaW5fZ3JhcGiUiXViLg=='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([1.0, 1.0, 1.0, 1.0, -1.0, 2.0]).reshape((2, 3)).clone().requires_grad_()
#     a0 = b0.as_strided((1, 6), (6, 1), 0)
#     named = {'b0': b0, 'a0': a0}
#     return named, [b0, a0]
#
#
# def program(x0, x1):
#     v0 = x0.t()
#     v1 = x0.mm(v0)
#     v2 = x0.unsqueeze(2)
#     v3 = torch.enable_grad()(torch.mul)(x0, 2.0)
#     return (v3,)
#
#
# #: The caller's grad mode around the call; whether it backpropagates twice, the first
# #: time with retain_graph=True.
# GRAD_ENABLED = False
# RETAIN_GRAPH = False

if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else BACKEND
    verdict = judge(SUBJECT, backend)
    assert verdict.status == "pass", f"{backend}: " + "\n".join(verdict.found)
    print(f"{backend} agrees with the oracles")
