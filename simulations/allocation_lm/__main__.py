"""``python -m grpo_theory.studies.allocation_lm --out DIR [...]``: rules at equal rollouts."""

import sys

from .study import main

sys.exit(main())
