"""syncctl report's stragglers table on a made-up trace of 4 ranks and 15 steps: rank 3 is last in
every step by 20 ms; rank 0 stalls once, for 400 ms (its mean lateness, 26.7 ms, is the larger).
The table must name rank 3 first: the rank the others wait for most often is the straggler.

    timeline_report_test.py DAEMON_CLI_DIR
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, sys.argv[1])
import timeline_report  # noqa: E402


def trace():
    events = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "node 0"}}]
    step_us = 30_000
    for step in range(15):
        t0 = step * 1_000_000
        for rank in range(4):
            late = 20_000 if rank == 3 else (400_000 if rank == 0 and step == 7 else rank * 100)
            events.append({"ph": "i", "name": "submit layer0", "pid": 0, "tid": rank, "ts": t0 + late})
        events.append({"ph": "b", "cat": "tensor", "name": "layer0", "pid": 0, "id": step, "ts": t0})
        events.append({"ph": "b", "cat": "tensor", "name": "WAIT_FOR_RANKS", "pid": 0, "id": step, "ts": t0})
        events.append({"ph": "e", "cat": "tensor", "name": "WAIT_FOR_RANKS", "pid": 0, "id": step, "ts": t0 + 20_000})
        events.append({"ph": "e", "cat": "tensor", "name": "layer0", "pid": 0, "id": step, "ts": t0 + step_us})
    return events


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        with open(path, "w") as f:
            json.dump(trace(), f)
        summary = timeline_report.report(path, os.path.join(d, "report.html"))
        page = open(os.path.join(d, "report.html")).read()
    assert summary["worst_rank"] == 3, "the stragglers table names rank %s first" % summary["worst_rank"]
    first_row = page.split('<table id="stragglers">', 1)[1].split("</tr>", 2)[1]
    assert first_row.startswith("<tr><td>3</td>"), first_row
    print("stragglers table: rank 3 first (last in 15 of 15 steps), rank 0's one 400 ms stall not taken for it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
