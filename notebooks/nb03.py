"""Cells of 03_gradient_starvation.ipynb (built by notebooks/build.py)."""

NAME = "03_gradient_starvation.ipynb"

CELLS = [
("md", r"""# 03 · Gradient starvation on the sequence bandit

The digit-sum bandit of `toy/`: the prompt is a target $t$, the policy (a small MLP that
reads the previous token and the remaining sum) writes digits $0..3$ and an end token, and
the verifier gives reward 1 exactly when the digits sum to $t$ and the response ended. Large
targets need long responses, which the initial policy rarely writes: they are the
under-generated positives. This notebook shows (1) low-$w$ positives appearing as one rollout
batch is reused, (2) what each method's kernel gives them, and (3) the learning curves of the
committed evaluation run (`toy/results/eval`)."""),
("code", """import io
import json
from IPython.display import Image, Markdown, display
from nano_respo.kernel import LossConfig, coefficients, group_advantages, policy_loss, sequence_log_weight
from toy.envs import DigitSum
from toy.train import Job, train
from nano_respo.report import outcome_table, paired_table, plot_rewards, plot_low_w"""),
("md", r"""## The environment and its verifier"""),
("code", """env = DigitSum()
print("digits 0..%d, end token %d, max_len %d" % (env.digits - 1, env.end, env.max_len))
print("training targets:", env.train_prompts.tolist())
print("held-out targets:", env.heldout_prompts.tolist(), "(38 and 40 beyond every training target)")
torch.manual_seed(0)
policy = env.make_policy()
g = torch.Generator().manual_seed(0)
batch = env.sample(policy, torch.tensor([12, 12, 30, 30]), g)
for prompt, tokens, mask, r in zip(batch.prompts, batch.tokens, batch.mask, env.reward(batch)):
    print(f"target {prompt.item():>2}: {tokens[mask].tolist()}  reward {r.item():.0f}")"""),
("md", r"""## 1. Reuse one rollout batch and watch the weights drift

Warm the policy up for 15 rollout batches (ReSPO, $R=4$), then draw one batch of 16 prompts
$\times$ 8 responses, compute group advantages $A_i=r_i-\bar r_{\text{group}}$, and take 16
sequence-clip updates on it (that is $R=16$ for seq_clip). After each update, the sequence
weight of every response is $w=\pi_\theta(y|x)/\mu(y|x)$ with $\mu$ the policy that sampled it."""),
("code", """policy = env.make_policy()
torch.manual_seed(1)
warm = train(Job("seq", "respo", reuse=4, seed=1, lr=0.01, iterations=15), policy=policy)
print("reward of the warm-up batches:", [round(r, 2) for r in warm["reward_curve"]])

g = torch.Generator().manual_seed(5)
prompts = env.train_prompts[torch.randint(len(env.train_prompts), (16,), generator=g)].repeat_interleave(8)
batch = env.sample(policy, prompts, g)
reward = env.reward(batch)
adv, _ = group_advantages(reward, 8)
positive = adv > 0
print(f"batch reward {reward.mean():.2f}; {int(positive.sum())} positives, {int((adv < 0).sum())} negatives")

optimizer = torch.optim.Adam(policy.parameters(), lr=0.01)
clip = LossConfig(method="seq_clip")
methods = ["seq_clip", "grpo", "gspo", "cispo", "vespo", "respo"]
given = {m: ([], []) for m in methods}   # per step: mean phi of low-w positives, of the others
ever_low = torch.zeros_like(positive)
for step in range(16):
    logp = env.log_probs(policy, batch)                                           # [B, T]
    log_w = sequence_log_weight(logp, batch.old_logp, batch.mask)                 # [B]
    low = positive & (log_w < math.log(0.8))
    ever_low |= low
    for method in methods:      # what each kernel would give on this drifted batch
        phi, _ = coefficients(logp, batch.old_logp, adv, batch.mask, LossConfig(method=method))  # [B, T]
        per_response = (phi * batch.mask).sum(-1) / batch.mask.sum(-1)                           # [B]
        if low.any():
            given[method][0].append(per_response[low].mean().item())
            given[method][1].append(per_response[positive & ~low].mean().item())
    if step in (0, 2, 4, 8, 15):
        print(f"step {step:>2}: share of positives with w < 0.8 = {low.sum() / positive.sum():.2f};"
              f" 10% quantile of log w over positives = {log_w[positive].quantile(0.1):.2f}")
    loss, stats = policy_loss(logp, batch.old_logp, adv, batch.mask, clip)
    optimizer.zero_grad(); loss.backward(); optimizer.step()"""),
("md", r"""The first update is on-policy ($w=1$ for everyone); after a few updates a large share of the
positives sits below $w=1-\epsilon$, until the clipped updates eventually push the rest of
them up again. Which positives fall behind? Compare the lengths of those that were ever low-$w$
with the others:"""),
("code", """lengths = batch.mask.sum(-1).float()
for name, rows in (("ever low-w positives", ever_low), ("other positives", positive & ~ever_low)):
    print(f"{name:>21}: {int(rows.sum()):>2}, mean length {lengths[rows].mean():.1f}, mean target {batch.prompts[rows].float().mean():.1f}")"""),
("md", r"""## 2. What each method gives them

At every one of those updates, ask every method's kernel for its coefficient on the same
drifted batch (for a token-level method, the mean of its token coefficients over the
response), and average over the updates that had low-$w$ positives. The dotted line is the
on-policy weight 1 that every method gives at the first update."""),
("code", """for method in methods:
    lo, hi = given[method]
    print(f"{method:>8}: mean phi of a low-w positive {sum(lo) / len(lo):.3f}; of the other positives {sum(hi) / len(hi):.3f}")
fig, ax = plt.subplots(figsize=(6, 2.8))
x = torch.arange(len(methods)).float()
ax.bar(x - 0.2, [sum(given[m][0]) / len(given[m][0]) for m in methods], 0.4, label="low-w positives (w < 0.8)")
ax.bar(x + 0.2, [sum(given[m][1]) / len(given[m][1]) for m in methods], 0.4, label="other positives")
ax.axhline(1.0, color="k", ls=":", lw=0.8)
ax.set_xticks(x.tolist(), methods); ax.set_ylabel("mean phi"); ax.legend(fontsize=7)
plt.tight_layout(); plt.show()"""),
("md", r"""Read the bars with the kernel table of notebook 02 in mind. The sequence-level clip gives a
low-$w$ positive only its weight $w<0.8$ (about a third here), and VESPO's $w^2e^{-3(w-1)}$ also
falls off towards $w\to0$; ReSPO's nearly flat positive branch gives it slightly more than 1.
The token-level methods (GRPO, CISPO) and GSPO, whose length-normalised ratio stays close to 1
when the product drifts, keep most of the weight of a low-$w$ positive: on these, the
starvation is specific to *sequence-level* clipping. The right-hand bars show the other side:
positives pushed above $w=1.2$ lose their weight under every clip (GSPO's $\epsilon=4\cdot10^{-4}$
clips nearly all of them), while CISPO and ReSPO keep pushing them.

## 3. Learning curves (the committed evaluation run)

Read from `toy/results/eval/runs.jsonl`, written by the command in `toy/RESULTS.md` on seeds
that played no part in choosing learning rates or ReSPO's parameters. Bands are 95% t
intervals over seeds."""),
("code", """records = [json.loads(line) for line in open("../toy/results/eval/runs.jsonl")]
def show(plot, records):   # draw with nano_respo.report, show the 256-colour PNG it writes (small file)
    png = io.BytesIO()
    plot(records, png)
    display(Image(png.getvalue()))
show(plot_rewards, records)"""),
("code", """display(Markdown(outcome_table(records, 0.1)))
display(Markdown(paired_table(records)))"""),
("md", r"""How much of the positive $\phi$ mass the low-$w$ positives get, against how many of the
positives they are, averaged over the optimizer steps of each run:"""),
("code", """show(plot_low_w, records)"""),
("md", r"""What these runs do and do not show is written, with numbers, in `toy/RESULTS.md`."""),
]
