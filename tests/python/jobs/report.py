"""Each rank's result goes to its own file in $SYNCD_TEST_RESULTS (ranks share stdout, where
lines from different processes can interleave)."""
import os


def report(text):
    path = os.path.join(os.environ["SYNCD_TEST_RESULTS"], "rank%s.txt" % os.environ.get("SYNCD_RANK",
                                                                                       os.environ.get("SLURM_PROCID")))
    with open(path, "w") as f:
        f.write(text)
