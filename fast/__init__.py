"""aotspec.fast: the fast backend, the reference's plans run on real torch tensors.

`runtime.py` runs a `Plan` through the shared runtime skeleton; `codegen.py` turns each graph into
boxed Python code that deletes every value at its last use; `fusion.py` and `triton_kernels.py`
fuse pointwise chains into Triton kernels on CUDA (or with `AOTSPEC_TRITON=1`).
"""
