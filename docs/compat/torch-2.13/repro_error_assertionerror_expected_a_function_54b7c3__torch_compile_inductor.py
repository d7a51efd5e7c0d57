"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 2, a grad program).
Signature: error AssertionError: expected a function variable, got <class 'torch._dynamo.variables.lazy.L
Run alone, from anywhere aotspec is installed:
    python repro_error_assertionerror_expected_a_function_54b7c3__torch_compile_inductor.py                  fails: torch.compile:inductor is wrong here
    python repro_error_assertionerror_expected_a_function_54b7c3__torch_compile_inductor.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised AssertionError: expected a function variable, got <class 'torch._dynamo.variables.lazy.LazyVariableTracker'> from user code:
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:inductor'
SUBJECT = pickle.loads(base64.b64decode('gASVKgIAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLA4WUjAZ2YWx1ZXOUR7/wAAAAAAAAR0AAAAAAAAAARz/wAAAAAAAAh5SMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklIiMCG5vbl9sZWFmlIiMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXViaAwpgZR9lChoD4wCYjGUaBFLBIWUaBMoR7/wAAAAAAAARz/gAAAAAAAAR7/gAAAAAAAARz/wAAAAAAAAdJRoFYloFoloF4loGGgZaBqJdWKGlIwFdmlld3OUKYwEYXJnc5SMAmIwlIwCYjGUhpR1YowEYm9keZRoAIwFSW5zdHKUk5QpgZR9lCiMAm9wlIwGZGV0YWNolIwEb3V0c5SMAnYwlIWUaCJoAIwDVmFylJOUKYGUfZRoD4wCeDCUc2KFlHViaCgpgZR9lChoK4wLbm9fZ3JhZF9tdWyUaC2MAnYxlIWUaCJoMSmBlH2UaA+MAngwlHNiR0AAAAAAAAAAhpR1YoaUjAdyZXR1cm5zlIwCeDCUhZSMDGdyYWRfZW5hYmxlZJSIjAxyZXRhaW5fZ3JhcGiUiXViLg=='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0_leaf = torch.tensor([-1.0, 2.0, 1.0]).reshape((3,)).clone().requires_grad_()
#     b0 = b0_leaf * 1
#     b1 = torch.tensor([-1.0, 0.5, -0.5, 1.0]).reshape((4,))
#     named = {'b0_leaf': b0_leaf, 'b0': b0, 'b1': b1}
#     return named, [b0, b1]
#
#
# def program(x0, x1):
#     v0 = x0.detach()
#     v1 = torch.no_grad()(torch.mul)(x0, 2.0)
#     return (x0,)
#
#
# #: The caller's grad mode around the call; whether it backpropagates twice, the first
# #: time with retain_graph=True.
# GRAD_ENABLED = True
# RETAIN_GRAPH = False

if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else BACKEND
    verdict = judge(SUBJECT, backend)
    assert verdict.status == "pass", f"{backend}: " + "\n".join(verdict.found)
    print(f"{backend} agrees with the oracles")
