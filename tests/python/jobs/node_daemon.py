"""The syncd serving this rank's node (a job that kills it: --kill-daemon)."""
import os


def daemon_pid():
    """This node's syncd: the process serving SYNCD_RUN_DIR."""
    run_dir = os.environ["SYNCD_RUN_DIR"].encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) == b"syncd" and run_dir in argv:
            return int(pid)
    raise RuntimeError("no syncd serves %s" % run_dir)
