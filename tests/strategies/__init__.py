"""The differential tests' generators, `strategies.X`: they live in the package, as
`aotspec.fuzz.strategies.X`, so that an installed aotspec fuzzes with them (`aotspec fuzz`).

Each module of the package is this package's module of the same name, so `from
strategies.grad import grad_programs` finds the package's; a module added here is found too.
"""

import importlib
import sys

for _name in (
    "program",
    "model",
    "setups",
    "mutations",
    "grad",
    "stealing",
    "functions",
    "pointwise",
    "sizes",
):
    _module = importlib.import_module(f"aotspec.fuzz.strategies.{_name}")
    sys.modules[f"{__name__}.{_name}"] = _module
    globals()[_name] = _module
