"""Algorithm 1 training (``train``) and the optimisation theory (Lemma 6, Theorem 8)."""
