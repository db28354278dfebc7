"""``python -m grpo_theory.studies.smollm2 --model FILE --out DIR [...]``: the SmolLM2 study."""

import sys

from .study import main

sys.exit(main())
