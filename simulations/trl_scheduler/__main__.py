"""``python -m grpo_theory.studies.trl_scheduler --out DIR [...]``: the scheduler's A/B study."""

import sys

from .study import main

sys.exit(main())
