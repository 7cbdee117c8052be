"""The plan view: `render(request, plan)` draws a plan as a self-contained HTML page.

Nodes are grouped by topology domain, each GPU is a cell coloured by its jobs (MIG
instances at their memory slices, shared GPUs by fraction), and what the plan changes
(jobs started, moved or preempted, MIG layouts rebuilt) is marked; the page also lists
the unplaced jobs with their reasons and the plan's status, objective, bound and gap.
A pure function of its inputs: the service, the CLI and the tests all call it.
"""

from api.view.page import render
from api.view.scene import JobStatus, Scene, build_scene

__all__ = ["JobStatus", "Scene", "build_scene", "render"]
