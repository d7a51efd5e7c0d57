"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 26, a mutation program).
Signature: error AssertionError: wrong number of dimensions# for op: input
Run alone, from anywhere aotspec is installed:
    python repro_error_assertionerror_wrong_number_of_dim_9fee7c__torch_compile_inductor.py                  fails: torch.compile:inductor is wrong here
    python repro_error_assertionerror_wrong_number_of_dim_9fee7c__torch_compile_inductor.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised AssertionError: wrong number of dimensions3 for op: input
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:inductor'
SUBJECT = pickle.loads(base64.b64decode('gASVRQMAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLBIWUjAZ2YWx1ZXOUKEe/+AAAAAAAAEe/4AAAAAAAAEc/4AAAAAAAAEc/+AAAAAAAAHSUjAZ6ZXJvZWSUiYwNcmVxdWlyZXNfZ3JhZJSJjAhub25fbGVhZpSJdWJoDCmBlH2UKGgPjAJiMZRoEWgSaBMoR0AhAAAAAAAAR0AjAAAAAAAAR0AlAAAAAAAAR0AnAAAAAAAAdJRoFYloFoloF4l1YmgMKYGUfZQoaA+MAmIylGgRaBJoEyhHQDKAAAAAAABHQDOAAAAAAABHQDSAAAAAAABHQDWAAAAAAAB0lGgViGgWiWgXiXVih5SMBXZpZXdzlGgAjApDYWxsZXJWaWV3lJOUKYGUfZQoaA+MAmEwlIwEYmFzZZSMAmIwlIwFc2l6ZXOUSwFLAksCh5SMB3N0cmlkZXOUSwRLAksBh5SMBm9mZnNldJRLAIwIZGV0YWNoZWSUiXViaCMpgZR9lChoD4wCYTGUaCeMAmIwlGgpSwFLBIaUaCtLBEsBhpRoLUsAaC6JdWJoIymBlH2UKGgPjAJhMpRoJ4wCYjKUaClLAUsEhpRoK0sESwGGlGgtSwBoLol1YoeUjARhcmdzlChoMYwCYjGUaDdoJnSUdWKMBGJvZHmUaACMBUluc3RylJOUKYGUfZQojAJvcJSMBHNldF+UjARvdXRzlCloPGgAjANWYXKUk5QpgZR9lGgPjAJ4MZRzYmhIKYGUfZRoD2hLc2KGlHViaEEpgZR9lChoRGhFaEYpaDxoSCmBlH2UaA+MAngzlHNiaEgpgZR9lGgPaEtzYoaUdWJoQSmBlH2UKGhEjARmdWxslGhGjAJ2MJSFlGg8SwWFlEdACAAAAAAAAIaUdWKHlIwHcmV0dXJuc5QojAJ4MJRoS4wCeDKUaFNoWnSUjAxncmFkX2VuYWJsZWSUiIwMcmV0YWluX2dyYXBolIl1Yi4='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-1.5, -0.5, 0.5, 1.5]).reshape((4,))
#     b1 = torch.tensor([8.5, 9.5, 10.5, 11.5]).reshape((4,))
#     b2 = torch.tensor([18.5, 19.5, 20.5, 21.5]).reshape((4,))
#     a0 = b0.as_strided((1, 2, 2), (4, 2, 1), 0)
#     a1 = b0.as_strided((1, 4), (4, 1), 0)
#     a2 = b2.as_strided((1, 4), (4, 1), 0)
#     torch.ops.inductor.resize_storage_bytes_(b2, 0)
#     named = {'b0': b0, 'b1': b1, 'b2': b2, 'a0': a0, 'a1': a1, 'a2': a2}
#     return named, [a1, b1, a2, a0]
#
#
# def program(x0, x1, x2, x3):
#     torch.ops.aten.set_.source_Tensor(x1, x1)
#     torch.ops.aten.set_.source_Tensor(x3, x1)
#     v0 = torch.full((5,), 3.0)
#     return (x0, x1, x2, x3, v0,)
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
