"""pytest setup shared by the syncd.torch suites.

test_torch.py runs on every rank of a job (each rank runs the same tests in the same order, as
Horovod's own suites do under horovodrun):

    PYTHONPATH=build/python build/bin/syncrun -N 2 -n 4 -- /usr/bin/python3 -m pytest tests/python/test_torch.py

test_jobs.py launches whole jobs itself through syncrun (needs SYNCD_BIN_DIR or build/bin).
"""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("SYNCD_BUILD_DIR", os.path.join(ROOT, "build"))
if os.path.join(BUILD, "python") not in sys.path:
    sys.path.insert(0, os.path.join(BUILD, "python"))


def pytest_collection_modifyitems(config, items):
    """Under SYNCD_ONE_CASE_PER_JOB=1 (the sanitizer suite, deploy/sanitize.sh) test_jobs.py runs
    the first case of each parametrized test only: every kind of job (a rank or a node lost, a
    replacement, a restart, growth) still runs through the instrumented daemons, without the shapes
    and modes that the plain suite already covers (each case is a whole job: all of them took
    longer under ASan than CI allows). Only test_jobs.py: the suites run on every rank keep every
    case, and their order, which every rank must share."""
    if os.environ.get("SYNCD_ONE_CASE_PER_JOB") != "1":
        return
    seen, kept, dropped = set(), [], []
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] == "test_jobs":
            name = getattr(item, "originalname", item.name)
            if name in seen:
                dropped.append(item)
                continue
            seen.add(name)
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
