"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 7, a mutation program).
Signature: error AssertionError: Encountered a set_ on a graph input, but the input has other mutations t
Run alone, from anywhere aotspec is installed:
    python repro_error_assertionerror_encountered_a_set_o_98e711__torch_compile_inductor.py                  fails: torch.compile:inductor is wrong here
    python repro_error_assertionerror_encountered_a_set_o_98e711__torch_compile_inductor.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised BackendCompilerFailed: backend='inductor' raised: AssertionError: Encountered a set_ on a graph input, but the input has other mutations that we cannot
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:inductor'
SUBJECT = pickle.loads(base64.b64decode('gASV6AQAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksDhpSMBnZhbHVlc5QoR8AEAAAAAAAAR7/4AAAAAAAAR7/gAAAAAAAARz/gAAAAAAAARz/4AAAAAAAAR0AEAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklImMCG5vbl9sZWFmlIl1YmgMKYGUfZQoaA+MAmIxlGgRSwJLAksCh5RoEyhHQBoAAAAAAABHQB4AAAAAAABHQCEAAAAAAABHQCMAAAAAAABHQCUAAAAAAABHQCcAAAAAAABHQCkAAAAAAABHQCsAAAAAAAB0lGgViWgWiWgXiXViaAwpgZR9lChoD4wCYjKUaBFLBIWUaBMoR0AygAAAAAAAR0AzgAAAAAAAR0A0gAAAAAAAR0A1gAAAAAAAdJRoFYloFoloF4l1YoeUjAV2aWV3c5RoAIwKQ2FsbGVyVmlld5STlCmBlH2UKGgPjAJhMJSMBGJhc2WUjAJiMpSMBXNpemVzlEsEhZSMB3N0cmlkZXOUSwGFlIwGb2Zmc2V0lEsAjAhkZXRhY2hlZJSJdWJoJSmBlH2UKGgPjAJoMZRoKYwCYjCUaCtLAksBSwOHlGgtSwNLA0sBh5RoL0sAaDCJdWKGlIwEYXJnc5SMAmIxlIwCYjCUaCiHlHVijARib2R5lChoAIwFSW5zdHKUk5QpgZR9lCiMAm9wlIwFY29weV+UjARvdXRzlCloOGgAjANWYXKUk5QpgZR9lGgPjAJ4MZRzYmhFKYGUfZRoD2hIc2KGlHViaD4pgZR9lChoQYwJdHJhbnNwb3NllGhDjAJ2MJSFlGg4aEUpgZR9lGgPaEhzYksASwCHlHViaD4pgZR9lChoQYwVcmVzaXplX3N0b3JhZ2VfYnl0ZXNflGhDKWg4aEUpgZR9lGgPjAJ4MpRzYksAhpR1Ymg+KYGUfZQoaEFoVmhDKWg4aEUpgZR9lGgPaFlzYksQhpR1Ymg+KYGUfZQoaEGMBWZpbGxflGhDKWg4aEUpgZR9lGgPaFlzYkdACAAAAAAAAIaUdWJoPimBlH2UKGhBaFZoQyloOGhFKYGUfZRoD2hZc2JLAIaUdWJoPimBlH2UKGhBaFZoQyloOGhFKYGUfZRoD2hZc2JLEIaUdWJoPimBlH2UKGhBaGJoQyloOGhFKYGUfZRoD2hZc2JHQAgAAAAAAACGlHViaD4pgZR9lChoQWhiaEMpaDhoRSmBlH2UaA+MAngwlHNiR0AAAAAAAAAAhpR1Ymg+KYGUfZQoaEGMBHNldF+UaEMpaDhoRSmBlH2UaA9oWXNiaEUpgZR9lGgPaFlzYoaUdWJoPimBlH2UKGhBaH1oQyloOGhFKYGUfZRoD2hZc2JoRSmBlH2UaA9oSHNihpR1Ymg+KYGUfZQoaEFoQmhDKWg4aEUpgZR9lGgPaHlzYmhFKYGUfZRoD2h5c2KGlHVidJSMB3JldHVybnOUKGh5aEhoWWhPdJSMDGdyYWRfZW5hYmxlZJSIjAxyZXRhaW5fZ3JhcGiUiXViLg=='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]).reshape((2, 3))
#     b1 = torch.tensor([6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5]).reshape((2, 2, 2))
#     b2 = torch.tensor([18.5, 19.5, 20.5, 21.5]).reshape((4,))
#     a0 = b2.as_strided((4,), (1,), 0)
#     h1 = b0.as_strided((2, 1, 3), (3, 3, 1), 0)
#     named = {'b0': b0, 'b1': b1, 'b2': b2, 'a0': a0, 'h1': h1}
#     return named, [b1, b0, a0]
#
#
# def program(x0, x1, x2):
#     x1.copy_(x1)
#     v0 = x1.transpose(0, 0)
#     torch.ops.inductor.resize_storage_bytes_(x2, 0)
#     torch.ops.inductor.resize_storage_bytes_(x2, 16)
#     x2.fill_(3.0)
#     torch.ops.inductor.resize_storage_bytes_(x2, 0)
#     torch.ops.inductor.resize_storage_bytes_(x2, 16)
#     x2.fill_(3.0)
#     x0.fill_(2.0)
#     torch.ops.aten.set_.source_Tensor(x2, x2)
#     torch.ops.aten.set_.source_Tensor(x2, x1)
#     x0.copy_(x0)
#     return (x0, x1, x2, v0,)
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
