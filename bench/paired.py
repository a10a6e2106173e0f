"""Paired rounds for the benchmark programs: prepflow and its yardstick run
in turn, the ratio taken round by round (this machine is shared and noisy),
and medians reported."""
import statistics


def paired_rounds(rounds, ours, theirs):
    """Calls ours() and theirs() in turn `rounds` times: (our rates, their
    rates, ratios per round)."""
    a, b, ratios = [], [], []
    for _ in range(rounds):
        a.append(ours())
        b.append(theirs())
        ratios.append(a[-1] / b[-1])
    return a, b, ratios


def medians(ours_key, ours, theirs_key, theirs, ratios, digits=None):
    """The JSON fields of paired rounds: each side's median rate (rounded to
    `digits`), the median ratio and every round's."""
    return {ours_key: round(statistics.median(ours), digits),
            theirs_key: round(statistics.median(theirs), digits),
            "ratio_median": round(statistics.median(ratios), 2),
            "ratios": [round(r, 2) for r in ratios]}
