"""`plan explain [--rank N] [--vs M]`: the derivation of plan #N of the ranked table (the same ranking
`plan` prints with the same flags), why each of its neighbours loses, and, with --vs, the per-term
difference between plan #N and plan #M."""

from __future__ import annotations

from planner.errors import InputError


def explain_doc(ctx, res, doc: dict, rank: int, vs: int | None, usable_gib: float) -> None:
    """Add `explained_rank`, `derivation`, `why_not` (and with `vs`: `vs`) to a search document."""
    from planner.analysis.explain import derivation, versus, why_not

    shown = len(res.plans)
    for flag, n in (("--rank", rank), ("--vs", vs)):
        if n is not None and n > shown:
            raise InputError(f"{flag} {n}: only {shown} plan{'s were' if shown != 1 else ' was'} found; "
                             f"give a number from 1 to {shown}")
    if vs is not None and vs == rank:
        raise InputError(f"--vs {vs} is the explained plan itself (--rank {rank}): give another rank")
    ev = res.plans[rank - 1]
    doc["explained_rank"] = rank
    doc["why_not"] = why_not(ctx, ev, usable_gib)
    doc["derivation"] = derivation(ctx, ev)
    if vs is not None:
        other = res.plans[vs - 1]
        doc["vs"] = {"rank": rank, "other_rank": vs, "plan": doc["plans"][rank - 1]["plan"],
                     "other_plan": doc["plans"][vs - 1]["plan"], "terms": versus(ctx, ev, other)}
