"""Hypothesis strategies for differential testing: random valid programs over aliased inputs.

A program is data (`program.py`): a `Setup` of the caller's tensors, then a body of `Instr`
records over named values. Each generator builds one valid by construction (docs/design.md
section 7), drawing only what its symbolic `Model` of the tensors and storages (`model.py`) says
eager PyTorch accepts:

- `setups.py`: `setups()` and `grad_setups()`, the tensors a caller makes before the call;
- `mutations.py`: `programs()`, views, in-place ops, copy_, set_ and resizes over aliased inputs
  (`compiled=True`: only what `aotspec.compile` accepts);
- `grad.py`: `grad_programs()`, programs with backward (leaves that require grad, buffers, a
  chain of differentiable ops, writes to intermediates and buffers);
- `stealing.py`: `stealing_programs()`, either kind after reading a stolen list of activations;
- `pointwise.py`: `pointwise_programs()`, chains of pointwise ops over several dtypes, with
  special values, for the fusion pass and its Triton kernels;
- `sizes.py`: `sized_programs()`, a pointwise program and sizes of one dimension of its
  tensors, at which one compiled function is called in turn;
- `complex.py`: `complex_programs()`, chains of complex ops (arithmetic, matmul, conjugate views,
  views between complex and real, a write through `.imag`, the fft family, `polar`) on complex
  tensors that require grad.

Conventions: `lay` is a `Strided` layout, `v` a variable name, `obj` an index into the model's
objects, `st` an index into its storages, `xs` a list of x.
"""
