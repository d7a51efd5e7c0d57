"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 23, a mutation program).
Signature: error RuntimeError: cannot mutate tensors with frozen storage
Run alone, from anywhere aotspec is installed:
    python repro_error_runtimeerror_cannot_mutate_tensors_595b15__torch_compile_inductor.py                  fails: torch.compile:inductor is wrong here
    python repro_error_runtimeerror_cannot_mutate_tensors_595b15__torch_compile_inductor.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised BackendCompilerFailed: backend='inductor' raised: RuntimeError: cannot mutate tensors with frozen storage
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:inductor'
SUBJECT = pickle.loads(base64.b64decode('gASVHgQAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksCSwKHlIwGdmFsdWVzlChHwAwAAAAAAABHwAQAAAAAAABHv/gAAAAAAABHv+AAAAAAAABHP+AAAAAAAABHP/gAAAAAAABHQAQAAAAAAABHQAwAAAAAAAB0lIwGemVyb2VklIiMDXJlcXVpcmVzX2dyYWSUiYwIbm9uX2xlYWaUiXViaAwpgZR9lChoD4wCYjGUaBFLA0sChpRoEyhHQB4AAAAAAABHQCEAAAAAAABHQCMAAAAAAABHQCUAAAAAAABHQCcAAAAAAABHQCkAAAAAAAB0lGgViGgWiWgXiXViaAwpgZR9lChoD4wCYjKUaBFLAksDhpRoEyhHQDGAAAAAAABHQDKAAAAAAABHQDOAAAAAAABHQDSAAAAAAABHQDWAAAAAAABHQDaAAAAAAAB0lGgViWgWiWgXiXVih5SMBXZpZXdzlChoAIwKQ2FsbGVyVmlld5STlCmBlH2UKGgPjAJhMJSMBGJhc2WUjAJiMJSMBXNpemVzlChLAksBSwJLAnSUjAdzdHJpZGVzlChLBEsESwJLAXSUjAZvZmZzZXSUSwCMCGRldGFjaGVklIl1YmglKYGUfZQoaA+MAmExlGgpjAJiMZRoK0sChZRoLUsBhZRoL0sAaDCJdWJoJSmBlH2UKGgPjAJhMpRoKYwCYjKUaCtLAUsCSwOHlGgtSwZLA0sBh5RoL0sAaDCJdWJoJSmBlH2UKGgPjAJhM5RoKYwCYjKUaCtLA0sChpRoLUsBSwOGlGgvSwBoMIl1YnSUjARhcmdzlCiMAmIwlGg/aDOMAmIxlGg5aCh0lHVijARib2R5lChoAIwFSW5zdHKUk5QpgZR9lCiMAm9wlIwEc2V0X5SMBG91dHOUKWhEaACMA1ZhcpSTlCmBlH2UaA+MAngylHNiaFEpgZR9lGgPjAJ4NJRzYoaUdWJoSimBlH2UKGhNjARtdWxflGhPKWhEaFEpgZR9lGgPjAJ4MZRzYkcAAAAAAAAAAIaUdWJoSimBlH2UKGhNjBVyZXNpemVfc3RvcmFnZV9ieXRlc1+UaE8paERoUSmBlH2UaA+MAngzlHNiSxiGlHViaEopgZR9lChoTYwFZmlsbF+UaE8paERoUSmBlH2UaA9oZXNiRz/gAAAAAAAAhpR1YnSUjAdyZXR1cm5zlCiMAngwlGheaFRoZWhXjAJ4NZR0lIwMZ3JhZF9lbmFibGVklIiMDHJldGFpbl9ncmFwaJSJdWIu'))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5]).reshape((2, 2, 2))
#     b1 = torch.tensor([7.5, 8.5, 9.5, 10.5, 11.5, 12.5]).reshape((3, 2))
#     b2 = torch.tensor([17.5, 18.5, 19.5, 20.5, 21.5, 22.5]).reshape((2, 3))
#     a0 = b0.as_strided((2, 1, 2, 2), (4, 4, 2, 1), 0)
#     a1 = b1.as_strided((2,), (1,), 0)
#     a2 = b2.as_strided((1, 2, 3), (6, 3, 1), 0)
#     a3 = b2.as_strided((3, 2), (1, 3), 0)
#     torch.ops.inductor.resize_storage_bytes_(b0, 0)
#     torch.ops.inductor.resize_storage_bytes_(b1, 0)
#     named = {'b0': b0, 'b1': b1, 'b2': b2, 'a0': a0, 'a1': a1, 'a2': a2, 'a3': a3}
#     return named, [b0, a3, a1, b1, a2, a0]
#
#
# def program(x0, x1, x2, x3, x4, x5):
#     torch.ops.aten.set_.source_Tensor(x2, x4)
#     x1.mul_(0.0)
#     torch.ops.inductor.resize_storage_bytes_(x3, 24)
#     x3.fill_(0.5)
#     return (x0, x1, x2, x3, x4, x5,)
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
