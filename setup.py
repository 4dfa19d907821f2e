"""The build of kgpu, beyond what pyproject.toml declares: the scheduling core compiled.

The modules below are the session's hot path (opening a session over tens of thousands of
pods, the actions, the victim search, the cycle's bookkeeping). mypyc, the compiler that
ships with mypy, turns them into C extensions from the same type-annotated source: no line
of them is written for the compiler, and a session decides exactly as in plain Python, in
about two thirds of the time (docs/BENCHMARKS.md).

When it compiles:

- a wheel or a plain ``pip install .`` compiles them where a C compiler and the Python
  headers are at hand, and installs them as plain Python where not (``AllOrNothing``: a
  failed compile is a message, not a failed install);
- an editable install (``pip install -e .``, what ``make`` does for development) never
  does: a compiled module sits beside its source and is imported instead of it, so an edit
  would silently not run;
- ``KGPU_COMPILE=0`` turns it off for any build.

``kgpu --version`` says which one is installed.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

COMPILED = [
    "kgpu/actions/allocate.py",
    "kgpu/actions/backfill.py",
    "kgpu/actions/claim_quota.py",
    "kgpu/actions/enqueue.py",
    "kgpu/actions/ordering.py",
    "kgpu/actions/placement.py",
    "kgpu/actions/preempt.py",
    "kgpu/actions/reclaim.py",
    "kgpu/actions/topology_placement.py",
    "kgpu/actions/victim_pool.py",
    "kgpu/actions/victims.py",
    "kgpu/framework/best_nodes.py",
    "kgpu/framework/charges.py",
    "kgpu/framework/cycle.py",
    "kgpu/framework/scheduler.py",
    "kgpu/framework/session.py",
    "kgpu/framework/session_callbacks.py",
    "kgpu/framework/session_open.py",
    "kgpu/framework/session_result.py",
    "kgpu/framework/session_scratch.py",
    "kgpu/framework/session_snapshot.py",
    "kgpu/framework/shape_cache.py",
    "kgpu/framework/statement.py",
    "kgpu/framework/status.py",
    "kgpu/kube/api/resource_types.py",
    "kgpu/kube/objects/device_allocation.py",
    "kgpu/kube/objects/fields.py",
    "kgpu/kube/objects/gpu_dialects.py",
    "kgpu/kube/objects/gpu_env.py",
    "kgpu/kube/objects/node_pod.py",
    "kgpu/kube/objects/object_bounds.py",
    "kgpu/kube/objects/record_signature.py",
    "kgpu/kube/snapshot/alike_pods.py",
    "kgpu/kube/snapshot/allocation_rebuild.py",
    "kgpu/kube/snapshot/cache_snapshot.py",
    "kgpu/kube/snapshot/conversion_cache.py",
    "kgpu/kube/snapshot/kubelet_claims.py",
    "kgpu/kube/snapshot/session_input.py",
    "kgpu/model/card.py",
    "kgpu/model/decision.py",
    "kgpu/model/fair_share.py",
    "kgpu/model/gpu.py",
    "kgpu/model/job.py",
    "kgpu/model/ledger.py",
    "kgpu/model/pod.py",
    "kgpu/model/resources.py",
    "kgpu/plugins/node/best_fit.py",
    "kgpu/plugins/node/device_choice.py",
    "kgpu/plugins/node/fgd.py",
    "kgpu/plugins/node/gpu_fit.py",
    "kgpu/plugins/node/gpu_random.py",
    "kgpu/plugins/node/gpu_request_check.py",
    "kgpu/plugins/node/gpu_slots.py",
    "kgpu/plugins/node/gpu_tightest.py",
    "kgpu/plugins/node/resource_fit.py",
    "kgpu/plugins/node/strand_aware_fgd.py",
    "kgpu/plugins/node/filter_verdicts.py",
    "kgpu/plugins/session/capacity_card.py",
    "kgpu/plugins/session/gang.py",
    "kgpu/plugins/session/priority_order.py",
    "kgpu/plugins/session/proportion.py",
    "kgpu/state/cluster.py",
    "kgpu/state/device_tables.py",
    "kgpu/state/fragmentation.py",
    "kgpu/state/leftover.py",
    "kgpu/state/node_classes.py",
    "kgpu/state/records.py",
]


def _compiling() -> bool:
    """A build that makes modules (not one that only reads metadata, where compiling would
    cost its minute for nothing) and is not editable."""
    if os.environ.get("KGPU_COMPILE", "1") == "0":
        return False
    if any(command in sys.argv for command in ("editable_wheel", "develop")):
        return False
    return any(command in sys.argv for command in ("bdist_wheel", "build", "build_ext", "install"))


def _extensions() -> list[Any]:
    if not _compiling():
        return []
    # From a clean build directory: a wheel packs whatever build/lib holds, so an extension
    # left there by an earlier build (of a module since dropped from COMPILED) would ship,
    # and be imported instead of its source.
    shutil.rmtree("build", ignore_errors=True)
    try:
        from mypyc.build import mypycify

        return list(mypycify(COMPILED, opt_level="3"))
    except ImportError as exc:  # a build without its declared requirements (no isolation)
        print(f"kgpu: the scheduling core stays plain Python: no mypyc here ({exc})")
        return []


class AllOrNothing(build_ext):
    """Builds the compiled modules together or not at all. Each module's own small
    extension loads the one shared library mypyc makes for all of them: one without the
    other would not import. Without a C compiler or the Python headers, none is kept and
    the modules install as plain Python."""

    def build_extensions(self) -> None:
        for extension in self.extensions:
            extension.optional = False  # a failure raises here, to be handled below
        try:
            super().build_extensions()
        except Exception as exc:  # whatever the compiler raised: the source still runs
            for extension in self.extensions:
                built = self.get_ext_fullpath(extension.name)
                if os.path.exists(built):
                    os.remove(built)
            self.extensions = []
            print(f"kgpu: the scheduling core stays plain Python: compiling it failed ({exc})")


setup(ext_modules=_extensions(), cmdclass={"build_ext": AllOrNothing})
