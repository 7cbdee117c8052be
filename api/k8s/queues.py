"""Kueue and KAI-Scheduler queues -> `cluster.quotas` (contract 5.3) and the pods' tenants.

**Kueue.** A ClusterQueue is a tenant of the same name. Each flavor's `nvidia.com/gpu`
`nominalQuota` is guaranteed on the GPU model the flavor selects: its ResourceFlavor's
`nodeLabels` name the model through GFD's `nvidia.com/gpu.product` (the alias table of
`names.py`, as for nodes), or else select imported nodes whose models are the flavor's
(one model: that model; several: reported, the flavor left out). A flavor without
`nodeLabels` selects every node: its quota is keyed `"*"`. Flavors naming one model add up.

- `limit` = nominal + `borrowingLimit` on each key. Without a cohort nothing can be
  borrowed: limit = nominal. In a cohort without a `borrowingLimit` the key has no limit of
  its own (the cohort's bounds it, below).
- When the ClusterQueue quotas GPUs only through flavors that select models, every other
  GPU model of the cluster gets limit 0: Kueue admits nothing of the queue there.
- `spec.cohort` (`spec.cohortName` in v1beta2) becomes the ClusterQueue's `parent`: a
  tenant named after the cohort that guarantees the sum of its members' guarantees on each
  key (its members' guarantees so fit by construction) and is limited to what its members
  could use together: on `"*"` the sum of all their guarantees, on a model the sum of
  their guarantees on that model and on `"*"`. A cohort can lend only its members' quota.
- A Kueue `Cohort` object (hierarchical cohorts) adds its own `nominalQuota` per flavor,
  keyed as a ClusterQueue's, to what its members guarantee (Kueue's cohort quota is a
  shared pool on top of its members'); its `spec.parent` (`spec.parentName`) is its
  parent cohort, of which it is a member like a ClusterQueue. A root cohort is limited as
  above, over the whole tree; a cohort with a parent is limited on a key to its guarantee
  plus its `borrowingLimit` there, and has no limit of its own on keys without one (its
  parent bounds it). A cycle of parents is reported and cut where it closes.
- `lendingLimit` and MIG resource quotas (`nvidia.com/mig-*`) are not modelled (reported).

A pod's `kueue.x-k8s.io/queue-name` label names a LocalQueue of its namespace; its
ClusterQueue is the pod's tenant.

**KAI-Scheduler.** A Queue is a tenant of the same name, `spec.parentQueue` its parent.
`spec.resources.gpu.quota` (GPUs) is guaranteed on `"*"`; -1 (unlimited) has no finite
counterpart and guarantees nothing of its own (reported). `limit`: -1 is no limit; 0 or unset means
nothing beyond the quota (KAI's documented default), so limit = quota; a limit below the
quota is raised to it (reported). When the children of a queue guarantee more than the
queue, their guarantees are scaled down to fit (reported); a queue of unlimited quota
guarantees the sum of its children's. A pod's `kai.scheduler/queue`
label (`runai/queue` before KAI v0.6.0) names its queue.

**Precedence** of a pod's tenant: the `gpuplan.io/tenant` annotation, the Kueue queue,
the KAI queue, the namespace. A queue the objects do not define keeps the namespace
(reported when queue objects of that scheduler were given).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from api.importing import ImportIssue
from api.k8s import names
from api.k8s.nodes import NodeState
from api.k8s.objects import ClusterQueue, K8sObjects, KueueCohort
from api.k8s.pods import PodInfo
from models import GpuModel, Quota
from models.request import ANY_MODEL, quota_errors

#: Pod labels naming a KAI queue, newest first (KAI v0.6.0 renamed `runai/queue`).
KAI_QUEUE_LABELS = ("kai.scheduler/queue", "runai/queue")
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass
class _Draft:
    """A tenant's quota while it is assembled: key -> amount; None in `limit` = no limit."""

    guaranteed: dict[str, float]
    limit: dict[str, float | None]
    parent: str | None = None

    def quota(self) -> Quota:
        return Quota(guaranteed={k: v for k, v in self.guaranteed.items() if v > 0},
                     limit={k: v for k, v in self.limit.items() if v is not None},
                     parent=self.parent)


class QuotaImport:
    """Builds `cluster.quotas` from the objects against the imported nodes."""

    def __init__(self, objects: K8sObjects, nodes: Mapping[str, NodeState],
                 catalog: Mapping[str, GpuModel], aliases: Mapping[str, str]) -> None:
        self.objects = objects
        self.nodes = nodes
        self.catalog = catalog
        self.aliases = aliases
        self.issues: list[ImportIssue] = []
        self.models = sorted({s.model for s in nodes.values()})

    def note(self, obj: str, message: str, skipped: bool = False) -> None:
        """Report `obj` (kept adjusted, or skipped)."""
        self.issues.append(ImportIssue(object=obj, skipped=skipped, message=message))

    # ------------------------------------------------------------------ Kueue

    def flavor_model(self, name: str, ref: str) -> str | None:
        """The quota key of a ResourceFlavor: its model, `"*"`, or None (reported)."""
        flavor = self.objects.flavors.get(name)
        if flavor is None:
            self.note(ref, f"ResourceFlavor {name!r} was not given; its quota is left out")
            return None
        labels = dict(flavor.node_labels)
        if not labels:
            return ANY_MODEL
        product = labels.get(names.LABEL_PRODUCT)
        if product is not None:
            model = names.resolve_model(names.parse_product(product).base, self.catalog,
                                        self.aliases)
            if model is not None:
                return model
        models = sorted({s.model for s in self.nodes.values()
                         if all(s.labels.get(k) == v for k, v in labels.items())})
        if len(models) == 1:
            return models[0]
        what = "no imported GPU node" if not models else f"nodes of {len(models)} models " \
            f"({', '.join(models)})"
        self.note(ref, f"ResourceFlavor {name!r} selects {what}; its quota is left out")
        return None

    def kueue_draft(self, cq: ClusterQueue) -> _Draft:
        """One ClusterQueue's quota (module doc)."""
        ref = f"clusterqueue/{cq.name}"
        draft = _Draft(guaranteed={}, limit={})
        for fq in cq.flavors:
            key = self.flavor_model(fq.flavor, ref)
            if key is None:
                continue
            draft.guaranteed[key] = draft.guaranteed.get(key, 0.0) + fq.nominal
            if cq.cohort is None:
                extra: float | None = 0.0
            else:
                extra = fq.borrowing_limit
            prev = draft.limit.get(key, 0.0)
            draft.limit[key] = None if prev is None or extra is None else \
                prev + fq.nominal + extra
            if fq.lending_limit is not None:
                self.note(ref, f"lendingLimit of flavor {fq.flavor!r} is not modelled: "
                               "all of its unused quota may be lent")
        if cq.mig_resources:
            self.note(ref, "quotas of " + ", ".join(sorted(set(cq.mig_resources)))
                      + " are not modelled (a gpuplan quota counts GPUs per model)")
        if draft.guaranteed and ANY_MODEL not in draft.guaranteed:
            for model in self.models:
                draft.limit.setdefault(model, 0.0)
        return draft

    def cohort_draft(self, members: Iterable[_Draft], own: KueueCohort | None = None,
                     parent: str | None = None) -> _Draft:
        """A cohort: its own quota (a Cohort object's) plus its members' guarantees; a root
        is limited to what the tree could use, one with a parent by its borrowingLimits."""
        out = _Draft(guaranteed={}, limit={}, parent=parent)
        borrow: dict[str, float | None] = {}
        if own is not None:
            ref = f"cohort/{own.name}"
            for fq in own.flavors:
                key = self.flavor_model(fq.flavor, ref)
                if key is None:
                    continue
                out.guaranteed[key] = out.guaranteed.get(key, 0.0) + fq.nominal
                prev = borrow.get(key, 0.0)
                borrow[key] = None if prev is None or fq.borrowing_limit is None else \
                    prev + fq.borrowing_limit
                if fq.lending_limit is not None:
                    self.note(ref, f"lendingLimit of flavor {fq.flavor!r} is not modelled: "
                                   "all of its unused quota may be lent")
            if own.mig_resources:
                self.note(ref, "quotas of " + ", ".join(sorted(set(own.mig_resources)))
                          + " are not modelled (a gpuplan quota counts GPUs per model)")
        for m in members:
            for key, g in m.guaranteed.items():
                out.guaranteed[key] = out.guaranteed.get(key, 0.0) + g
        if parent is not None:
            out.limit = {key: out.guaranteed.get(key, 0.0) + b
                         for key, b in borrow.items() if b is not None}
            return out
        every = out.guaranteed.get(ANY_MODEL, 0.0)
        out.limit = {key: g + (every if key != ANY_MODEL else 0.0)
                     for key, g in out.guaranteed.items()}
        out.limit[ANY_MODEL] = sum(out.guaranteed.values())
        return out

    def cohort_parents(self, cqs: Mapping[str, _Draft]) -> dict[str, str | None]:
        """Every cohort (named by a ClusterQueue, a Cohort object or its parent) -> its
        parent cohort. Names taken by a ClusterQueue and parent cycles are reported and cut."""
        cohorts = self.objects.cohorts
        named = {cq.cohort for cq in self.objects.cluster_queues.values() if cq.cohort} | \
            set(cohorts) | {c.parent for c in cohorts.values() if c.parent}
        parents: dict[str, str | None] = {}
        for name in sorted(named):
            if name in cqs:
                if name in cohorts:
                    self.note(f"cohort/{name}", "a ClusterQueue has the same name; the "
                                                "cohort is left out", skipped=True)
                continue
            parent = cohorts[name].parent if name in cohorts else None
            if parent is not None and parent in cqs:
                self.note(f"cohort/{name}", f"parent {parent!r} is a ClusterQueue, not a "
                                            "cohort; imported without a parent")
                parent = None
            parents[name] = parent
        for name in sorted(parents):
            seen = [name]
            while (up := parents[seen[-1]]) is not None and up not in seen:
                seen.append(up)
            if up is not None:  # back at a cohort of the walk: a cycle
                self.note(f"cohort/{seen[-1]}", f"parent {up!r} closes a cycle of cohorts "
                                                f"({' -> '.join([*seen, up])}); cut here")
                parents[seen[-1]] = None
        return parents

    def kueue(self) -> dict[str, _Draft]:
        """Every ClusterQueue and cohort as a tenant."""
        drafts = {name: self.kueue_draft(cq) for name, cq in
                  sorted(self.objects.cluster_queues.items())}
        parents = self.cohort_parents(drafts)
        members: dict[str, list[str]] = {c: [] for c in parents}
        for name, cq in sorted(self.objects.cluster_queues.items()):
            if cq.cohort is None:
                continue
            if cq.cohort not in parents:
                self.note(f"clusterqueue/{name}", f"cohort {cq.cohort!r} has the name of a "
                                                  "ClusterQueue; the cohort is left out")
                continue
            members[cq.cohort].append(name)
            drafts[name].parent = cq.cohort
        for cohort, parent in parents.items():
            if parent is not None:
                members[parent].append(cohort)

        def build(cohort: str) -> _Draft:
            if cohort not in drafts:  # members first: the tree is acyclic (cut above)
                kids = [build(m) if m in parents else drafts[m] for m in members[cohort]]
                drafts[cohort] = self.cohort_draft(kids, self.objects.cohorts.get(cohort),
                                                   parents[cohort])
            return drafts[cohort]

        for cohort in sorted(parents):
            build(cohort)
        return drafts

    # ------------------------------------------------------------------ KAI

    def kai(self, taken: Mapping[str, _Draft]) -> dict[str, _Draft]:
        """Every KAI Queue as a tenant (module doc)."""
        drafts: dict[str, _Draft] = {}
        for name, q in sorted(self.objects.kai_queues.items()):
            ref = f"queue/{name}"
            if name in taken:
                self.note(ref, "a Kueue ClusterQueue or cohort has the same name; left out",
                          skipped=True)
                continue
            draft = _Draft(guaranteed={}, limit={})
            if q.quota == -1:
                self.note(ref, "gpu quota -1 (unlimited) has no finite guarantee in gpuplan; it "
                               "guarantees what its children do, if any")
            elif q.quota > 0:
                draft.guaranteed[ANY_MODEL] = q.quota
            quota = max(q.quota, 0.0)
            if q.limit == -1 or (q.quota == -1 and not q.limit):
                draft.limit[ANY_MODEL] = None
            elif q.limit is not None and 0 < q.limit < quota:
                self.note(ref, f"gpu limit {q.limit:g} is below its quota {quota:g}; "
                               "raised to the quota")
                draft.limit[ANY_MODEL] = quota
            else:
                draft.limit[ANY_MODEL] = max(q.limit or 0.0, quota)
            drafts[name] = draft
        for name, q in sorted(self.objects.kai_queues.items()):
            if name not in drafts or q.parent is None:
                continue
            if q.parent not in drafts:
                self.note(f"queue/{name}", f"parent queue {q.parent!r} was not given; "
                                           "imported without a parent")
                continue
            drafts[name].parent = q.parent
        self.fit_children(drafts)
        return drafts

    def fit_children(self, drafts: Mapping[str, _Draft]) -> None:
        """Scale children's `"*"` guarantees down to their parent's where they exceed it;
        a parent of unlimited quota (-1) guarantees its children's sum instead."""
        kids: dict[str, list[str]] = {}
        for name, d in drafts.items():
            if d.parent is not None:
                kids.setdefault(d.parent, []).append(name)
        for parent, members in sorted(kids.items()):
            total = sum(drafts[m].guaranteed.get(ANY_MODEL, 0.0) for m in members)
            own = drafts[parent].guaranteed.get(ANY_MODEL, 0.0)
            if total > own and self.objects.kai_queues[parent].quota == -1:
                # Unlimited: it guarantees at least what its children do.
                drafts[parent].guaranteed[ANY_MODEL] = total
            elif total > own:
                factor = own / total
                for m in members:
                    g = drafts[m].guaranteed.get(ANY_MODEL)
                    if g:
                        drafts[m].guaranteed[ANY_MODEL] = g * factor
                self.note(f"queue/{parent}", f"its children ({', '.join(sorted(members))}) "
                                             f"guarantee {total:g} GPUs, more than its {own:g}"
                                             f"; their guarantees are scaled by {factor:.3g}")

    # ------------------------------------------------------------------ all

    def quotas(self) -> dict[str, Quota]:
        """`cluster.quotas`; whatever the request would still refuse is reported and dropped
        (parent links first, then whole tenants), so the import never fails on quotas."""
        drafts = self.kueue()
        drafts.update(self.kai(drafts))
        quotas: dict[str, Quota] = {}
        for name, d in drafts.items():
            try:
                quotas[name] = d.quota()
            except ValidationError as e:  # e.g. a cohort summing past the request's bounds
                self.note(f"tenant/{name}", f"quota {e.errors()[0]['msg']}; left out",
                          skipped=True)
        quotas = {t: q.model_copy(update={"parent": None})
                  if q.parent is not None and q.parent not in quotas else q
                  for t, q in quotas.items()}
        # Each round cuts one parent link or drops one tenant: 2n rounds always end it.
        for _ in range(2 * len(quotas) + 1):
            errors = quota_errors(quotas, self.catalog)
            if not errors:
                break
            loc, message = errors[0]
            tenant = str(loc[2])
            if loc[-1] == "parent" and quotas[tenant].parent is not None:
                quotas[tenant] = quotas[tenant].model_copy(update={"parent": None})
                self.note(f"tenant/{tenant}", f"{message}; imported without a parent")
            else:
                del quotas[tenant]
                quotas = {t: q.model_copy(update={"parent": None}) if q.parent == tenant
                          else q for t, q in quotas.items()}
                self.note(f"tenant/{tenant}", f"{message}; its quota is left out",
                          skipped=True)
        return quotas


def pod_tenant(pod: PodInfo, objects: K8sObjects) -> tuple[str | None, str | None]:
    """(tenant from the pod's queue labels or None, a problem to report or None)."""
    local = pod.labels.get(KUEUE_QUEUE_LABEL)
    if local:
        cq = objects.local_queues.get((pod.namespace, local))
        if cq is not None:
            return cq, None
        if objects.kueue:
            return None, (f"LocalQueue {pod.namespace}/{local} was not given; tenant is the "
                          "namespace")
    for label in KAI_QUEUE_LABELS:
        queue = pod.labels.get(label)
        if queue:
            if queue in objects.kai_queues:
                return queue, None
            if objects.kai_queues:
                return None, f"KAI queue {queue!r} was not given; tenant is the namespace"
    return None, None
