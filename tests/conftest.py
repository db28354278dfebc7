import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

# The test process opts into float64 itself (the package never changes JAX's configuration on
# import; tests/test_precision.py checks that the public routines are float64 without this).
jax.config.update("jax_enable_x64", True)

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("ci")
