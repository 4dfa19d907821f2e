"""Proportion: fair shares of the queue tree, the queue order, and who may reclaim from whom.

At open the fair share of every queue is computed top down from the cluster's capacity and
the queues' demand (:mod:`kgpu.model.fair_share`, explained in docs/QUEUES.md). Then:

- queue order: the queue with the lowest dominant ratio (held ÷ fair share, the largest
  over resources) goes first; among equals the higher queue priority;
- victim order: pods of the most over-served queue first;
- can_reclaim: a job may take resources back only while its queue, with the job's
  needs added, stays within its fair share in every resource the job asks for;
- reclaimable: a victim unit may be taken when, below the lowest common ancestor of the
  two queues, every queue on the victim's side is over its fair share in a resource the
  unit holds and keeps at least its deserved quota once the unit is gone, and every queue
  on the reclaimer's side stays within its fair share with the reclaimer's needs added.
  The last rule is what keeps two queues from taking the same GPUs back and forth. A
  queue on the victim's side that is not ``reclaimable`` (Volcano's ``reclaimable:
  false``) gives nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from kgpu.framework.session import Session, SessionPlugin
from kgpu.model.fair_share import dominant_ratio, fair_shares
from kgpu.model.job import JobInfo, Task
from kgpu.model.resources import CPU, GPU, MEMORY, Vector, mig_share
from kgpu.plugins import names
from kgpu.state.cluster import ClusterState


def capacity(state: ClusterState) -> Vector:
    """What the schedulable nodes offer: CPU, memory, GPU milli (MIG instances by their
    share of a GPU), and milli-cards by name."""
    ok = state.schedulable
    cap: Vector = {
        CPU: int(state.cpu_cap[ok].sum()),
        MEMORY: int(state.mem_cap[ok].sum()),
        GPU: int(state.gpu_cap[ok].sum()),
    }
    if state.mig_profiles:  # MIG instances count their share of a GPU, as pods do
        instances = state.mig_cap[ok].sum(axis=0).tolist()
        for profile, count in zip(state.mig_profiles, instances, strict=True):
            cap[GPU] += count * mig_share(profile)
    for name, units in state.offered_cards().items():
        cap[name] = cap.get(name, 0) + units
    return cap


class Proportion:
    name = names.PROPORTION

    def on_open(self, session: Session) -> None:
        ledger, tree = session.ledger, session.tree
        offered = capacity(session.state)
        offered[GPU] += session.dra_capacity()  # DRA GPUs are GPUs too
        ledger.fair = fair_shares(tree, offered, ledger.demand)

        # Each queue's dominant ratio, and the ledger's version when it was worked out: it
        # stands until the queue's account next changes. Lists, not a dictionary of pairs:
        # asked for every queue re-keyed, after every job served.
        ratios: list[float] = [0.0] * len(tree)
        ratios_at: list[int] = [-1] * len(tree)
        changed, allocated, fair = ledger.changed, ledger.allocated, ledger.fair

        def ratio(queue: int) -> float:
            """The queue's dominant ratio, kept until the queue's account next changes."""
            if ratios_at[queue] >= changed[queue]:
                return ratios[queue]
            value = dominant_ratio(allocated[queue], fair[queue])
            ratios[queue] = value
            ratios_at[queue] = ledger.version
            return value

        def within_fair(queues: tuple[int, ...], need: Vector) -> bool:
            # Typed as what it is given, not as protocols: a loop over a dict's items and
            # its lookups compile to direct dict operations, the protocols' to generic calls.
            for q in queues:
                held, fair = ledger.allocated[q], ledger.fair[q]
                for r, amount in need.items():
                    if amount > 0 and held.get(r, 0) + amount > fair.get(r, 0):
                        return False
            return True

        # What a reclaimer needs (``Session.need``), kept while its queue's account stands:
        # its pods are placed and evicted only with a charge to that account, and a trial
        # eviction of another queue's pod leaves it standing.
        needs: dict[str, tuple[int, Vector]] = {}

        def need_of(job: JobInfo) -> Vector:
            mark = ledger.changed[job.queue]
            found = needs.get(job.key)
            if found is None or found[0] != mark:
                found = needs[job.key] = (mark, session.need(job))
            return found[1]

        lcas: dict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...]]] = {}
        # Queue-level verdicts, by (reclaimer, victim queue, resources the unit holds), with
        # the ledger's version they were reached at: one judgement per queue, not one per
        # pod. A verdict reads the accounts of the queues on both sides below the common
        # ancestor (the reclaimer's own first, whose stamp also keeps ``need_of``), so it
        # stands while none of them changed since: a trial's evictions from other queues,
        # put back, leave it standing.
        verdicts: dict[tuple[object, ...], tuple[int, bool]] = {}

        def queues_agree(reclaimer: JobInfo, theirs_q: int, involved: tuple[str, ...]) -> bool:
            pair = (reclaimer.queue, theirs_q)
            found_sides = lcas.get(pair)
            if found_sides is None:
                found_sides = lcas[pair] = tree.lca_below(*pair)
            mine, theirs = found_sides
            key = (reclaimer.key, theirs_q, involved)
            found = verdicts.get(key)
            if found is not None:
                at, changed = found[0], ledger.changed
                if all(changed[q] <= at for q in mine) and all(changed[q] <= at for q in theirs):
                    return found[1]
            ok = all(
                any(ledger.allocated[q].get(r, 0) > ledger.fair[q].get(r, 0) for r in involved)
                for q in theirs
            ) and within_fair(mine, need_of(reclaimer))
            verdicts[key] = (ledger.version, ok)
            return ok

        # What a victim unit holds, and in which resources: the same for as long as its
        # pods run (a pod put back after a trial gets its very allocation back), and a
        # unit is judged again at every trial. Kept by its pods: one, or a whole gang.
        holdings: dict[object, tuple[Vector, tuple[str, ...]]] = {}

        def holding(unit: Sequence[Task]) -> tuple[Vector, tuple[str, ...]]:
            key = unit[0].pod.key if len(unit) == 1 else tuple([t.pod.key for t in unit])
            found = holdings.get(key)
            if found is None:
                taken = session.held_total(unit)
                found = (taken, tuple(sorted([r for r, amount in taken.items() if amount > 0])))
                holdings[key] = found
            return found

        def reclaimable(reclaimer: JobInfo, unit: Sequence[Task]) -> bool:
            theirs_q = session.job_for(unit[0]).queue
            if theirs_q < 0 or reclaimer.queue < 0 or theirs_q == reclaimer.queue:
                return False
            taken, involved = holding(unit)
            if not queues_agree(reclaimer, theirs_q, involved):
                return False
            for q in lcas[(reclaimer.queue, theirs_q)][1]:
                if not tree.specs[q].reclaimable:
                    return False  # Volcano's reclaimable: false, on the victim's side
                held, deserved = ledger.allocated[q], tree.specs[q].deserved
                for r in involved:
                    floor = deserved.get(r, 0)
                    if floor and held.get(r, 0) - taken[r] < floor:
                        return False
            return True

        # Read once: the tree is plain Python even compiled, and a queue is keyed after
        # every job served from it.
        minus_priority = [-spec.priority for spec in tree.specs]

        session.callbacks.queue_order.append(lambda q: (ratio(q), minus_priority[q]))
        session.callbacks.victim_order.append(lambda job, t: (-ratio(job.queue),))
        session.callbacks.can_reclaim.append(lambda job, need: within_fair((job.queue,), need))

        # Per reclaimer's queue: each other leaf's paths below their common ancestor, the
        # reclaimer's side as an index into ``sides`` (few: one per ancestor), the other
        # side without the leaf itself. Asked for ~100 leaves a job, ~1,000 jobs a session.
        sides: list[tuple[int, ...]] = []
        side_index: dict[tuple[int, ...], int] = {}
        routes: dict[int, dict[int, tuple[int, tuple[int, ...]]]] = {}

        paths = tree.path  # the tree stands for the session

        def route(own: int, q: int) -> tuple[int, tuple[int, ...]]:
            # ``tree.lca_below`` without its sets: paths run up from the leaf, so the
            # common ancestors are the paths' common end.
            a, b = paths[own], paths[q]
            common, shorter = 0, min(len(a), len(b))
            while common < shorter and a[-1 - common] == b[-1 - common]:
                common += 1
            mine = a[: len(a) - common]
            side = side_index.get(mine)
            if side is None:
                side = side_index[mine] = len(sides)
                sides.append(mine)
            # ``q``'s path starts at ``q`` (a leaf, not ``own``: below the common part).
            return side, b[1 : len(b) - common]

        # Which queues are over their share (dominant ratio past 1), as of the ledger's
        # version ``over_at``; ``flips`` counts the changes of any of them. What
        # ``over_by_side`` finds depends on nothing else, and most changes to accounts
        # (a trial's evictions, put back; a pod placed) leave every queue on its side of 1.
        over: list[bool] = []
        over_at = [-1]
        flips = [0]

        def over_now() -> list[bool]:
            if over_at[0] == ledger.version:
                return over
            if not over:
                over.extend([ratio(q) > 1.0 for q in range(len(tree))])
            else:
                seen, changed = over_at[0], ledger.changed
                for q in range(len(over)):
                    if changed[q] > seen:  # its account changed since: look again
                        now = ratio(q) > 1.0
                        if now != over[q]:
                            over[q] = now
                            flips[0] += 1
            over_at[0] = ledger.version
            return over

        def over_by_side(own: int, candidates: set[int]) -> dict[int, set[int]]:
            """Of ``candidates``, the leaves whose path below their common ancestor with
            ``own`` is over its share, by the index of ``own``'s side below it."""
            table = routes.setdefault(own, {})
            out: dict[int, set[int]] = {}
            flags = over_now()
            for q in candidates:  # each verdict stands alone: the order does not matter
                if q == own or q < 0 or not flags[q]:
                    continue
                found = table.get(q)
                if found is None:
                    found = table[q] = route(own, q)
                side, above = found
                for v in above:
                    if not flags[v]:
                        break
                else:
                    leaves = out.get(side)
                    if leaves is None:
                        out[side] = {q}
                    else:
                        leaves.add(q)
            return out

        # ``over_by_side`` per reclaimer's queue, with the count of flips and the
        # candidates it was worked out at: it stands until a queue crosses its share.
        overs: dict[int, tuple[int, frozenset[int], dict[int, set[int]]]] = {}

        def reclaim_from(reclaimer: JobInfo, candidates: set[int]) -> set[int]:
            """Of ``candidates``, the leaves whose path below the common ancestor is over its
            share, when the reclaimer's side has room (a superset of what ``reclaimable``
            takes from: it looks at the resources each unit holds)."""
            own = reclaimer.queue
            found = overs.get(own)
            over_now()
            if found is None or found[0] != flips[0] or found[1] != candidates:
                found = (flips[0], frozenset(candidates), over_by_side(own, candidates))
                overs[own] = found
            out: set[int] = set()
            need: Vector | None = None
            for side, leaves in found[2].items():
                if need is None:
                    need = need_of(reclaimer)
                if within_fair(sides[side], need):
                    out |= leaves
            return out

        session.callbacks.reclaimable.append(reclaimable)
        session.callbacks.reclaim_from.append(reclaim_from)


_: type[SessionPlugin] = Proportion
