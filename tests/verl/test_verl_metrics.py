"""The grouped gradient-noise metric for verl batches (``grpo_theory.torch.verl_metrics``).

The checks and the rivals they exclude:
* exact unbiasedness: on a softmax over logits (one-token responses, every batch of two prompts
  enumerated), ``E[noise]`` is the step's exact MSE and ``E[signal]`` the squared gradient
  (``batch_moments``, a separately coded route); verl's independence formula (``iid_noise``) is
  not, and its expectation is what ``verl_proxy_audit`` says;
* multi-token responses: the shared-prefix inner products equal torch autograd on a tabular
  policy (a logit vector per context), padding included;
* an advantage whose mean is not the gradient (verl's ``grpo`` with its std division) makes
  ``noise`` differ from the MSE: the documented limit is real;
* verl's ``DataProto`` wrapper: each missing field or refused input is a one-line error naming
  what provides it.
"""

import itertools

import numpy as np
import pytest
import torch

from grpo_theory.core import SoftmaxBandit, batch_moments, get_estimator, verl_proxy_audit
from grpo_theory.torch import grouped_variance, grouped_variance_metrics

P_TOY = np.array([[0.3, 0.7], [0.6, 0.4]])
K = "grouped_variance/"


def _toy():
    return SoftmaxBandit(np.log(P_TOY), [[1.0, 0.0]] * 2)


def _expectations(name, G):
    """E[metric] over every batch of the two prompts' G responses each (design 'each')."""
    est = get_estimator(name)
    P, V = P_TOY.shape
    N = P * G
    spi = np.sum(P_TOY**2, axis=1)
    acc: dict = {}
    for ys in itertools.product(range(V), repeat=N):
        y = np.array(ys).reshape(P, G)
        prob = np.prod(P_TOY[np.arange(P)[:, None], y])
        z = (y == 0).astype(np.float64)  # action 0 earns 1
        adv = np.asarray(est(z), np.float64).reshape(-1)
        m = grouped_variance(torch.tensor(y.reshape(-1, 1)), torch.ones(N, 1),
                             torch.tensor(np.log(P_TOY[np.repeat(np.arange(P), G), y.reshape(-1)]))
                             [:, None], torch.tensor(np.repeat(spi, G))[:, None],
                             torch.tensor(adv)[:, None], torch.tensor(z.reshape(-1)),
                             np.repeat(np.arange(P), G))
        for k, v in m.items():
            acc[k] = acc.get(k, 0.0) + prob * v
    return acc


@pytest.mark.parametrize("name,G", [("grpo", 2), ("grpo", 4), ("vanilla", 3), ("jspo", 3)])
def test_noise_is_unbiased_for_the_exact_mse(name, G):
    bm = batch_moments(_toy(), name, G, design="each")
    e = _expectations(name, G)
    assert e[K + "grad_sq"] == pytest.approx(bm.second, rel=1e-9)
    assert e[K + "signal"] == pytest.approx(float(bm.gradient @ bm.gradient), rel=1e-9)
    assert e[K + "noise"] == pytest.approx(bm.mse, rel=1e-9)
    # the rival: verl's independence formula in the same space is the audit's proxy3, not the MSE
    audit = verl_proxy_audit(_toy(), name, G, 2, design="each")
    assert e[K + "iid_noise"] == pytest.approx(audit["proxy3"], rel=1e-9)
    if G > 1 and name != "vanilla":
        assert abs(e[K + "iid_noise"] / bm.mse - 1) > 0.1


def test_a_biased_advantage_is_not_measured_as_its_mse():
    """verl's grpo (std division): E[noise] = E||ghat||^2 - ||g||^2, which is not its MSE."""
    bm = batch_moments(_toy(), "grpo_std_verl", 4, design="each")
    e = _expectations("grpo_std_verl", 4)
    assert e[K + "noise"] == pytest.approx(bm.second - float(bm.gradient @ bm.gradient),
                                           rel=1e-9)
    assert abs(e[K + "noise"] / bm.mse - 1) > 0.05


def _tabular_batch(seed=0, V=3, T=4, unit_advantages=False):
    """Two prompts' groups of multi-token responses with shared prefixes and padding, and the
    logit-space ``X_i = sum_t A_it s_it`` of every response by autograd on a table of logits per
    context (``unit_advantages``: A = 1, so X_i is the score s_i)."""
    gen = torch.Generator().manual_seed(seed)
    table: dict = {}

    def logits(ctx):
        if ctx not in table:
            table[ctx] = torch.randn(V, generator=gen, dtype=torch.float64).requires_grad_()
        return table[ctx]

    rows = [(0, [0, 1, 2, 1], 4), (0, [0, 1, 0, 0], 3), (0, [0, 2, 2, 2], 4), (0, [1, 1, 1, 1], 2),
            (1, [2, 2, 0, 1], 4), (1, [2, 2, 0, 0], 4), (1, [2, 0, 1, 0], 1), (2, [1, 0, 0, 0], 2)]
    N = len(rows)
    y = torch.tensor([r[1] for r in rows])
    mask = torch.tensor([[1.0] * r[2] + [0.0] * (T - r[2]) for r in rows], dtype=torch.float64)
    old = torch.zeros(N, T, dtype=torch.float64)
    spi = torch.zeros(N, T, dtype=torch.float64)
    adv = torch.randn(N, T, generator=gen, dtype=torch.float64) * mask
    if unit_advantages:
        adv = mask.clone()
    reward = torch.randn(N, generator=gen, dtype=torch.float64)
    logps = []
    for i, (x, toks, L) in enumerate(rows):
        lp = 0.0
        for t in range(L):
            ls = torch.log_softmax(logits((x,) + tuple(toks[:t])), 0)
            old[i, t] = ls[toks[t]].detach()
            spi[i, t] = (ls.detach().exp() ** 2).sum()
            lp = lp + adv[i, t] * ls[toks[t]]
        logps.append(lp)
    params = list(table.values())

    def flat(scalar):
        grads = torch.autograd.grad(scalar, params, retain_graph=True, allow_unused=True)
        return torch.cat([torch.zeros(V, dtype=torch.float64) if g is None else g
                          for g in grads])

    X = torch.stack([flat(lp) for lp in logps])
    return (y, mask, old, spi, adv, reward, [r[0] for r in rows]), X


def test_shared_prefix_inner_products_equal_autograd():
    """grad_sq and the independence formula: the Gram of the X_i by autograd."""
    (y, mask, old, spi, adv, reward, ids), X = _tabular_batch()
    N = len(ids)
    m = grouped_variance(y, mask, old, spi, adv, reward, ids)
    ghat = X.sum(0) / N
    assert m[K + "grad_sq"] == pytest.approx(float(ghat @ ghat), rel=1e-10)
    power = float((X * X).sum()) / N
    assert m[K + "iid_noise"] == pytest.approx((power - float(ghat @ ghat)) / (N - 1), rel=1e-10)
    assert m[K + "groups"] == 3 and m[K + "groups_skipped"] == 1  # prompt 2 has one response


def test_signal_u_statistic_equals_autograd():
    """The signal: sum over groups of G^2 U_x / N^2, U_x from the scores' Gram by autograd."""
    batch, _ = _tabular_batch()
    _, S = _tabular_batch(unit_advantages=True)
    y, mask, old, spi, adv, reward, ids = batch
    N = len(ids)
    u = 0.0
    for x in (0, 1):
        rows = [i for i in range(N) if ids[i] == x]
        n = len(rows)
        tot = sum(float(reward[i] * reward[j] * (S[i] @ S[j])) for i in rows for j in rows
                  if i != j)
        u += n * n * tot / (n * (n - 1)) / N**2
    m = grouped_variance(y, mask, old, spi, adv, reward, ids)
    assert m[K + "signal"] == pytest.approx(u, rel=1e-10)
    # prompt 2's single response counts in grad_sq but in neither signal nor noise
    X2 = _tabular_batch()[1][-1] / N
    assert m[K + "noise"] == pytest.approx(m[K + "grad_sq"] - float(X2 @ X2) - u, rel=1e-10)


def test_intervals_cover_the_exact_mse():
    """Sampled batches of 64 prompts: the noise's mean is the exact MSE within 4 se and its 95%
    interval covers the MSE in 90-100% of batches (so does the signal's); verl's independence
    formula lies more than 4 se from the MSE."""
    rng = np.random.default_rng(0)
    P, V, G, reps = 64, 3, 4, 200
    probs = rng.dirichlet(np.ones(V), size=P)
    toy = SoftmaxBandit(np.log(probs), [[1.0, 0.0, 0.0]] * P)
    bm = batch_moments(toy, "grpo", G, design="each")
    est = get_estimator("grpo")
    spi = np.repeat(np.sum(probs**2, axis=1), G)[:, None]
    ids = np.repeat(np.arange(P), G)
    one = torch.ones(P * G, 1)
    g2 = float(bm.gradient @ bm.gradient)
    noise, iid, cover, cover_signal = [], [], 0, 0
    for _ in range(reps):
        y = (rng.random((P, G, 1)) > np.cumsum(probs, 1)[:, None, :]).sum(-1)
        z = (y == 0).astype(np.float64)
        adv = np.asarray(est(z), np.float64).reshape(-1, 1)
        m = grouped_variance(torch.tensor(y.reshape(-1, 1)), one,
                             torch.tensor(np.log(probs[ids, y.reshape(-1)]))[:, None],
                             torch.tensor(spi), torch.tensor(adv), torch.tensor(z.reshape(-1)), ids)
        noise.append(m[K + "noise"])
        iid.append(m[K + "iid_noise"])
        cover += m[K + "noise_lo"] <= bm.mse <= m[K + "noise_hi"]
        cover_signal += m[K + "signal_lo"] <= g2 <= m[K + "signal_hi"]
    se = np.std(noise, ddof=1) / np.sqrt(reps)
    assert abs(np.mean(noise) - bm.mse) < 4 * se
    assert 0.90 <= cover / reps <= 1.0 and 0.90 <= cover_signal / reps <= 1.0
    assert abs(np.mean(iid) - bm.mse) > 4 * np.std(iid, ddof=1) / np.sqrt(reps)


def _proto(**drop):
    from verl import DataProto

    (y, mask, old, spi, adv, reward, ids), _ = _tabular_batch()
    tensors = {"responses": y, "response_mask": mask, "old_log_probs": old,
               "sum_pi_squared": spi, "advantages": adv,
               "token_level_rewards": reward[:, None] * torch.nn.functional.one_hot(
                   mask.sum(1).long() - 1, mask.shape[1])}
    extra = {"uid": np.array([f"u{i}" for i in ids], dtype=object)}
    for k in drop:
        tensors.pop(k, None)
        extra.pop(k, None)
    return DataProto.from_dict(tensors=tensors, non_tensors=extra), (y, mask, old, spi, adv,
                                                                      reward, ids)


def test_dataproto_wrapper_reads_verl_fields():
    data, args = _proto()
    assert grouped_variance_metrics(data) == pytest.approx(grouped_variance(*args), nan_ok=True)


@pytest.mark.parametrize("field,words", [("sum_pi_squared", "calculate_sum_pi_squared=True"),
                                         ("old_log_probs", "'old_log_probs'"),
                                         ("advantages", "compute_advantage"),
                                         ("uid", "'uid'")])
def test_dataproto_missing_fields_are_named(field, words):
    data, _ = _proto(**{field: True})
    with pytest.raises(ValueError, match=words):
        grouped_variance_metrics(data)


def test_off_policy_batches_are_refused():
    data, _ = _proto()
    data.batch["rollout_is_weights"] = torch.ones_like(data.batch["response_mask"])
    with pytest.raises(ValueError, match="rollout_is_weights"):
        grouped_variance_metrics(data)


@pytest.mark.parametrize("kwargs,words", [(dict(alpha=1.5), "alpha"),
                                          (dict(index=[0, 1]), "index"),
                                          (dict(rewards=torch.ones(3)), "rewards")])
def test_bad_arguments_are_named(kwargs, words):
    (y, mask, old, spi, adv, reward, ids), _ = _tabular_batch()
    args = dict(responses=y, response_mask=mask, old_log_probs=old, sum_pi_squared=spi,
                advantages=adv, rewards=reward, index=ids)
    args.update(kwargs)
    with pytest.raises(ValueError, match=words):
        grouped_variance(**args)


def _doc_table(text, header):
    """{name: [cells]} of the markdown table that starts with ``header`` in ``text``."""
    lines = text[text.index(header):].splitlines()[2:]
    out = {}
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0].split("`")[1]] = cells[1:]
    return out


def test_the_verl_page_tables_are_the_audit():
    """docs/verl.md's two tables of proxy3 ratios are what verl_proxy_audit computes."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "verl.md").read_text()
    p = np.array([0.1, 0.3, 0.6, 0.9])
    toy = SoftmaxBandit(np.log(np.stack([p, 1 - p], 1)), [[1.0, 0.0]] * 4)
    drawn = _doc_table(text, "| advantage | G = 1 | G = 2 | G = 4 | G = 8 |")
    given = _doc_table(text, "| advantage | G = 2 | G = 4 | G = 8 |")
    assert set(drawn) == {"vanilla", "grpo", "grpo_std_verl"}
    assert set(given) == {"vanilla", "grpo", "jspo"}
    for table, design, sizes, key in ((drawn, "independent", (1, 2, 4, 8), "variance"),
                                      (given, "each", (2, 4, 8), "mse")):
        for name, cells in table.items():
            for G, cell in zip(sizes, cells[-len(sizes):]):
                if not cell:
                    continue
                a = verl_proxy_audit(toy, name, G, 4, design=design)
                assert cell == f"{a['proxy3'] / a[key]:.3f}", (name, design, G)


def test_the_verl_page_b_table_is_the_audit_and_its_limit_the_noise_scale():
    """docs/verl.md's table by B: the audit at each B, and B -> infinity the ratio of the iid
    noise scale to GRPO's (``noise_scale``), which the audit approaches (within 1% at B = 256)."""
    from pathlib import Path

    from grpo_theory.core import noise_scale

    text = (Path(__file__).resolve().parents[2] / "docs" / "verl.md").read_text()
    lines = text[text.index("| G | B = 1 |"):].splitlines()[2:5]
    p = np.array([0.1, 0.3, 0.6, 0.9])
    toy = SoftmaxBandit(np.log(np.stack([p, 1 - p], 1)), [[1.0, 0.0]] * 4)
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        G = int(cells[0])
        for B, cell in zip((1, 2, 4, 16), cells[1:5]):
            assert cell == f"{verl_proxy_audit(toy, 'grpo', G, B)['ratio']:.3f}", (G, B)
        ns = noise_scale(toy.problem(), G)
        assert cells[5] == f"{ns.iid / ns.grpo:.3f}"
        assert verl_proxy_audit(toy, "grpo", G, 256)["ratio"] == pytest.approx(
            ns.iid / ns.grpo, rel=0.01)
