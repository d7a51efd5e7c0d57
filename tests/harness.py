"""What the differential tests share, so that no test module imports another: the oracle of
`aotspec fuzz`, which lives in the package (`aotspec.fuzz.oracle`, whose docstring says what it
holds) so that an installed aotspec has it. The standalone repros that tests/repro.py writes
import from here too.
"""

from aotspec.fuzz.oracle import (  # noqa: F401 (the names the tests and repros import)
    FuzzCase,
    Hooked,
    Outcome,
    call_and_backward,
    compare,
    eager_as_specified,
    eager_outcome,
    fast_divergence,
    numerically_explained,
    outcome,
    pack_bf16,
    pack_bf16_kept,
    pack_lossless,
    sizes_divergence,
    unpack_bf16,
    unpack_bf16_kept,
    unpack_lossless,
)
