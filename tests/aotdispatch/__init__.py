"""Ports of PyTorch's AOTAutograd tests (test/functorch/test_aotdispatch.py) to aotspec."""
