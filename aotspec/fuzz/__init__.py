"""Differential fuzzing: random valid programs (`strategies`), run on a backend and judged by
eager PyTorch and the reference (`oracle`); `aotspec fuzz` runs campaigns of them."""
