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

