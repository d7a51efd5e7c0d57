"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 0, a grad program).
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
SUBJECT = pickle.loads(base64.b64decode('gASVJAIAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLBIWUjAZ2YWx1ZXOUKEc/8AAAAAAAAEc/+AAAAAAAAEc/4AAAAAAAAEc/4AAAAAAAAHSUjAZ6ZXJvZWSUiYwNcmVxdWlyZXNfZ3JhZJSIjAhub25fbGVhZpSJdWKFlIwFdmlld3OUKYwEYXJnc5SMAmIwlIWUdWKMBGJvZHmUKGgAjAVJbnN0cpSTlCmBlH2UKIwCb3CUjANwb3eUjARvdXRzlIwCdjCUhZRoGmgAjANWYXKUk5QpgZR9lGgPjAJ4MJRzYkdACAAAAAAAAIaUdWJoHymBlH2UKGgijAZkZXRhY2iUaCSMAnYxlIWUaBpoKCmBlH2UaA9oK3NihZR1YmgfKYGUfZQoaCKMB3Jlc2hhcGWUaCSMAnYylIWUaBpoKCmBlH2UaA9oMHNiSwSFlIaUdWJoHymBlH2UKGgijA9lbmFibGVfZ3JhZF9tdWyUaCSMAnYzlIWUaBpoKCmBlH2UaA9oK3NiR0AAAAAAAAAAhpR1YnSUjAdyZXR1cm5zlGhBhZSMDGdyYWRfZW5hYmxlZJSJjAxyZXRhaW5fZ3JhcGiUiHViLg=='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([1.0, 1.5, 0.5, 0.5]).reshape((4,)).clone().requires_grad_()
#     named = {'b0': b0}
#     return named, [b0]
#
#
# def program(x0):
#     v0 = x0.pow(3.0)
#     v1 = x0.detach()
#     v2 = v1.reshape((4,))
#     v3 = torch.enable_grad()(torch.mul)(x0, 2.0)
#     return (v3,)
#
#
# #: The caller's grad mode around the call; whether it backpropagates twice, the first
# #: time with retain_graph=True.
# GRAD_ENABLED = False
# RETAIN_GRAPH = True

if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else BACKEND
    verdict = judge(SUBJECT, backend)
    assert verdict.status == "pass", f"{backend}: " + "\n".join(verdict.found)
    print(f"{backend} agrees with the oracles")
