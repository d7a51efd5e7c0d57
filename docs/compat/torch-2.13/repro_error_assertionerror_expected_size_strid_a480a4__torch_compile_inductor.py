"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 9, a mutation program).
Signature: error AssertionError: expected size #==#, stride #==# at dim=#; expected size #==#, stride #==
Run alone, from anywhere aotspec is installed:
    python repro_error_assertionerror_expected_size_strid_a480a4__torch_compile_inductor.py                  fails: torch.compile:inductor is wrong here
    python repro_error_assertionerror_expected_size_strid_a480a4__torch_compile_inductor.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised AssertionError: expected size 2==2, stride 3==4 at dim=0; expected size 3==2, stride 1==2 at dim=1; expected size 1==2, stride 1==1 at dim=2 Error in op: input
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:inductor'
SUBJECT = pickle.loads(base64.b64decode('gASV0wIAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksDhpSMBnZhbHVlc5QoR8AEAAAAAAAAR7/4AAAAAAAAR7/gAAAAAAAARz/gAAAAAAAARz/4AAAAAAAAR0AEAAAAAAAAdJSMBnplcm9lZJSIjA1yZXF1aXJlc19ncmFklImMCG5vbl9sZWFmlImMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXViaAwpgZR9lChoD4wCYjGUaBFLAksCSwKHlGgTKEdAGgAAAAAAAEdAHgAAAAAAAEdAIQAAAAAAAEdAIwAAAAAAAEdAJQAAAAAAAEdAJwAAAAAAAEdAKQAAAAAAAEdAKwAAAAAAAHSUaBWJaBaJaBeJaBhoGWgaiXVihpSMBXZpZXdzlGgAjApDYWxsZXJWaWV3lJOUKYGUfZQoaA+MAmEwlIwEYmFzZZSMAmIwlIwFc2l6ZXOUSwJLA0sBh5SMB3N0cmlkZXOUSwNLAUsBh5SMBm9mZnNldJRLAIwIZGV0YWNoZWSUiXVihZSMBGFyZ3OUaCaMAmIxlIaUdWKMBGJvZHmUaACMBUluc3RylJOUKYGUfZQojAJvcJSMBHNldF+UjARvdXRzlCloMGgAjANWYXKUk5QpgZR9lGgPjAJ4MJRzYmg8KYGUfZRoD4wCeDGUc2KGlHViaDUpgZR9lChoOIwEdmlld5RoOowCdjCUhZRoMGg8KYGUfZRoD2g/c2JLCIWUhpR1YoaUjAdyZXR1cm5zlIwCeDCUjAJ4MZRoR4eUjAxncmFkX2VuYWJsZWSUiIwMcmV0YWluX2dyYXBolIl1Yi4='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]).reshape((2, 3))
#     b1 = torch.tensor([6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5]).reshape((2, 2, 2))
#     a0 = b0.as_strided((2, 3, 1), (3, 1, 1), 0)
#     torch.ops.inductor.resize_storage_bytes_(b0, 0)
#     named = {'b0': b0, 'b1': b1, 'a0': a0}
#     return named, [a0, b1]
#
#
# def program(x0, x1):
#     torch.ops.aten.set_.source_Tensor(x0, x1)
#     v0 = x0.view((8,))
#     return (x0, x1, v0,)
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
