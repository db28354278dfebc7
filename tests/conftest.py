import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import grpo_theory  # noqa: E402,F401  (enables float64 before any test builds arrays)
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("ci")
