// Every failure the one-node issue names: each must give a clear error, never a hang, and leave
// the daemon serving.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>

#include "proto/doorbell.h"
#include "proto/shm_abi.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_client.h"

namespace syncd::testing {
namespace {



int Submit(syncd_client* c, const char* name, void* data, syncd_dtype dt, int ndim, const int64_t* shape,
           syncd_reduce_op op, syncd_handle* h) {
  syncd_tensor t{name, data, dt, ndim, shape, 0};
  return syncd_allreduce_async(c, &t, op, 1, 1, h);
}

struct MismatchCase {
  const char* label;
  const char* expect;  // substring of the error every rank must see
};

void PrintTo(const MismatchCase& c, std::ostream* os) { *os << c.label; }

class Mismatch : public ::testing::TestWithParam<MismatchCase> {};

TEST_P(Mismatch, EveryRankGetsAnErrorNamingTensorAndRanksThenDaemonServes) {
  const std::string label = GetParam().label, expect = GetParam().expect;
  Daemon d(3);
  auto st = RunRanks(d.run_dir(), 3, [&](syncd_client* c, int rank, int) {
    float buf[8] = {};
    int64_t shape[1] = {4};
    syncd_dtype dt = SYNCD_FLOAT32;
    syncd_reduce_op op = SYNCD_SUM;
    const bool odd = rank == 1;
    if (odd && label == "shape") shape[0] = 5;
    if (odd && label == "dtype") dt = SYNCD_INT32;
    if (odd && label == "op") op = SYNCD_MAX;
    syncd_handle h;
    int rc;
    if (label == "root") {
      syncd_tensor t{"grad.w", buf, dt, 1, shape, 0};
      rc = syncd_broadcast_async(c, &t, odd ? 2 : 0, &h);
    } else {
      rc = Submit(c, "grad.w", buf, dt, 1, shape, op, &h);
    }
    CHILD_CHECK(rc == SYNCD_OK, "%s", syncd_last_error());
    rc = syncd_wait(c, h, 10'000);
    const std::string msg = syncd_last_error();
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH, "rank %d: status %s: %s", rank, syncd_status_name(rc), msg.c_str());
    CHILD_CHECK(Contains(msg, "'grad.w'") && Contains(msg, expect) && Contains(msg, "rank 1"), "message: %s",
                msg.c_str());
    return 0;
  });
  ExpectAllSucceeded(st);
  ExpectDaemonServes(d, 3);
}

INSTANTIATE_TEST_SUITE_P(Errors, Mismatch,
                         ::testing::Values(MismatchCase{"shape", "mismatched shape"},
                                           MismatchCase{"dtype", "mismatched dtype"},
                                           MismatchCase{"op", "mismatched reduce op"},
                                           MismatchCase{"root", "mismatched root"}),
                         [](const auto& info) { return std::string(info.param.label); });

TEST(Errors, DuplicateInFlightNameFailsLocallyAtOnce) {
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int) {
    float a[4] = {1, 1, 1, 1};
    int64_t shape = 4;
    syncd_handle h1, h2;
    CHILD_CHECK(Submit(c, "dup", a, SYNCD_FLOAT32, 1, &shape, SYNCD_SUM, &h1) == SYNCD_OK, "%s", syncd_last_error());
    if (rank == 0) {
      const double t0 = NowS();
      const int rc = Submit(c, "dup", a, SYNCD_FLOAT32, 1, &shape, SYNCD_SUM, &h2);
      CHILD_CHECK(rc == SYNCD_ERR_DUPLICATE, "status %s", syncd_status_name(rc));
      CHILD_CHECK(NowS() - t0 < 0.01, "duplicate detection took %.3f s", NowS() - t0);
      CHILD_CHECK(Contains(syncd_last_error(), "'dup'") && Contains(syncd_last_error(), "in flight"), "%s",
                  syncd_last_error());
    }
    CHILD_CHECK(syncd_wait(c, h1, 10'000) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(a[0] == 2, "first request still completes correctly: %g", a[0]);
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(Errors, KilledClientFailsOthersNamingTheRankWithinOneSecond) {
  Daemon d(3);
  auto st = RunRanks(d.run_dir(), 3, [](syncd_client* c, int rank, int) {
    float a[4] = {};
    int64_t shape = 4;
    syncd_handle h;
    if (rank == 2) {
      CHILD_CHECK(Submit(c, "first", a, SYNCD_FLOAT32, 1, &shape, SYNCD_SUM, &h) == SYNCD_OK, "%s", syncd_last_error());
      usleep(300'000);  // the others are waiting on "second" by now
      raise(SIGKILL);
    }
    CHILD_CHECK(Submit(c, "first", a, SYNCD_FLOAT32, 1, &shape, SYNCD_SUM, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_wait(c, h, 10'000) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(Submit(c, "second", a, SYNCD_FLOAT32, 1, &shape, SYNCD_SUM, &h) == SYNCD_OK, "%s", syncd_last_error());
    const double t0 = NowS();
    const int rc = syncd_wait(c, h, 10'000);
    const double waited = NowS() - t0;
    CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST, "status %s: %s", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(Contains(syncd_last_error(), "rank 2") && Contains(syncd_last_error(), "'second'") &&
                    Contains(syncd_last_error(), "without detaching"),
                "%s", syncd_last_error());
    CHILD_CHECK(waited < 1.0, "error came after %.2f s", waited);
    // Later calls fail at once too, naming the lost rank; no hang.
    CHILD_CHECK(Submit(c, "third", a, SYNCD_FLOAT32, 1, &shape, SYNCD_SUM, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_wait(c, h, 2'000) == SYNCD_ERR_RANK_LOST && Contains(syncd_last_error(), "rank 2"), "%s",
                syncd_last_error());
    return 0;
  });
  EXPECT_TRUE(WIFSIGNALED(st[2]) && WTERMSIG(st[2]) == SIGKILL);
  st.pop_back();
  ExpectAllSucceeded(st);
  const std::string json = d.StatusJson();
  EXPECT_NE(json.find("\"lost\""), std::string::npos) << json;
  ExpectDaemonServes(d, 3);  // the dead rank's slot is reusable: its segment was reclaimed
}

// hvd.shutdown() then hvd.init() in a loop: the old connection's goodbye and hang-up and the new
// attach can land in one batch of the attach server's events, and a descriptor closed there may
// be reused at once. No rank may ever be taken for crashed (a stale event once dropped the new
// connection of the same rank).
TEST(Errors, RanksThatDetachAndAttachAgainAtOnceAreNeverTakenForCrashed) {
  Cluster cluster(2, 2, {"--log-level", "warn"});
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(Spawn([&, r] {
      for (int i = 0; i < 200; ++i) {
        syncd_client* c = AttachAs(cluster.node(r / 2).run_dir(), r, 4, r % 2, 2);
        CHILD_CHECK(c != nullptr, "rank %d, round %d: attach: %s", r, i, syncd_last_error());
        int32_t v = 1;
        int64_t shape = 1;
        syncd_tensor t{"reattached", &v, SYNCD_INT32, 1, &shape, 0};
        syncd_handle h;
        CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
        const int rc = syncd_wait(c, h, 20'000);
        CHILD_CHECK(rc == SYNCD_OK && v == 4, "rank %d, round %d: %s (%d)", r, i, syncd_last_error(), v);
        syncd_shutdown(c);
      }
      return 0;
    }));
  for (pid_t p : ranks) {
    const int s = WaitChild(p, 100'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  }
  for (int n = 0; n < 2; ++n) EXPECT_FALSE(Contains(cluster.node(n).Log(), "exited without detaching")) << cluster.node(n).Log();
}

// A job's ranks all leave and, past the rejoin grace, run again under the same job id (a second
// `srun` in one Slurm allocation, a node service's registered job): the first step's departed
// ranks are over and must not fail the second step's collectives, whatever order its ranks
// attach in.
TEST(Errors, AJobWhoseRanksAllLeftRunsAgainUnderItsIdPastTheGraceInAnyOrder) {
  Daemon d(2);
  constexpr uint64_t kJob = 0x5e9;
  auto step = [&](int first, int pause_ms) {
    std::vector<pid_t> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.push_back(Spawn([&, r] {
        if (r != first) usleep(pause_ms * 1000);
        syncd_client* c = AttachToJob(d.run_dir(), kJob, r, 2, r, 2);
        CHILD_CHECK(c != nullptr, "rank %d: attach: %s", r, syncd_last_error());
        int32_t v = 1;
        int64_t shape = 1;
        syncd_handle h;
        CHILD_CHECK(Submit(c, "step", &v, SYNCD_INT32, 1, &shape, SYNCD_SUM, &h) == SYNCD_OK, "%s", syncd_last_error());
        CHILD_CHECK(syncd_wait(c, h, 20'000) == SYNCD_OK && v == 2, "rank %d: %s (%d)", r, syncd_last_error(), v);
        if (r == first) usleep(pause_ms * 1000);  // the other rank leaves first
        syncd_shutdown(c);
        return 0;
      }));
    for (pid_t p : ranks) {
      const int s = WaitChild(p, 30'000);
      EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s << "\n" << d.Log();
    }
  };
  step(0, 300);  // rank 1 leaves first, rank 0 300 ms later
  usleep(3'500'000);  // past the grace and the stall check that follows it
  step(0, 500);  // rank 0 calls before rank 1 attaches
}

// Every rank detaches and attaches again (torch's destroy_process_group() then
// init_process_group()) between send/recv rounds across nodes: each node's daemon announces its
// departed ranks to the other, and that must not fail the next round's receives from them.
TEST(Errors, SendsAndReceivesAcrossNodesWorkAfterEveryRankDetachedAndAttachedAgain) {
  Cluster cluster(2, 2, {"--log-level", "warn"});
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(Spawn([&, r] {
      const int peer = (r + 2) % 4;  // on the other node
      for (int i = 0; i < 5; ++i) {
        syncd_client* c = AttachAs(cluster.node(r / 2).run_dir(), r, 4, r % 2, 2);
        CHILD_CHECK(c != nullptr, "rank %d, round %d: attach: %s", r, i, syncd_last_error());
        int32_t out = 100 * r + i, in = -1;
        int64_t shape = 1;
        syncd_tensor send{"ring.out", &out, SYNCD_INT32, 1, &shape, 0};
        syncd_tensor recv{"ring.in", &in, SYNCD_INT32, 1, &shape, 0};
        syncd_handle hs, hr;
        CHILD_CHECK(syncd_recv_async(c, &recv, peer, 0, &hr) == SYNCD_OK, "%s", syncd_last_error());
        CHILD_CHECK(syncd_send_async(c, &send, peer, 0, &hs) == SYNCD_OK, "%s", syncd_last_error());
        CHILD_CHECK(syncd_recv_wait(c, hr, 20'000, nullptr) == SYNCD_OK && in == 100 * peer + i,
                    "rank %d, round %d: %s (got %d)", r, i, syncd_last_error(), in);
        CHILD_CHECK(syncd_wait(c, hs, 20'000) == SYNCD_OK, "rank %d, round %d: %s", r, i, syncd_last_error());
        // Nobody leaves while a peer may still wait for its send.
        int32_t v = 1;
        syncd_tensor t{"round.done", &v, SYNCD_INT32, 1, &shape, 0};
        syncd_handle h;
        CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 20'000) == SYNCD_OK,
                    "%s", syncd_last_error());
        syncd_shutdown(c);
        usleep(20'000 * r);  // ranks come back at different times
      }
      return 0;
    }));
  for (pid_t p : ranks) {
    const int s = WaitChild(p, 100'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  }
}

TEST(Errors, RankThatDetachesEarlyFailsPeersThatStillNeedIt) {
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int) {
    if (rank == 1) return 0;  // shuts down cleanly at once
    usleep(200'000);
    float a[4] = {};
    int64_t shape = 4;
    syncd_handle h;
    CHILD_CHECK(Submit(c, "late", a, SYNCD_FLOAT32, 1, &shape, SYNCD_SUM, &h) == SYNCD_OK, "%s", syncd_last_error());
    const int rc = syncd_wait(c, h, 5'000);
    CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST, "status %s", syncd_status_name(rc));
    CHILD_CHECK(Contains(syncd_last_error(), "rank 1") && Contains(syncd_last_error(), "detached"), "%s",
                syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(Errors, StallsAreReportedNamingTheTensorAndTheMissingRank) {
  Daemon d(3, {"--stall-warning-s", "1"});
  const std::string dir = d.run_dir();
  SharedFlag checked;  // rank 1 lags until rank 0 has read the status
  auto st = RunRanks(d.run_dir(), 3, [&](syncd_client* c, int rank, int) {
    int32_t v = 1;
    int64_t shape = 1;
    syncd_tensor t{"slow.grad", &v, SYNCD_INT32, 1, &shape, 0};
    syncd_handle h;
    if (rank == 1) checked.Wait(30'000);  // the straggler
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
    if (rank == 0) {
      usleep(1'600'000);
      const std::string json = SyncctlStatusJson(dir);
      CHILD_CHECK(Contains(json, "\"stalls\":[{\"name\":\"slow.grad\"") && Contains(json, "\"missing_ranks\":[1]"),
                  "status while rank 1 lags: %s", json.c_str());
      // Ranks 0 and 2's requests wait for rank 1's in the table.
      CHILD_CHECK(Contains(json, "\"requests\":[{\"state\":\"waiting\",\"count\":\"2\",\"oldest_s\":") &&
                      Contains(json, "{\"state\":\"negotiating\",\"count\":\"0\""),
                  "%s", json.c_str());
      checked.Set();
    }
    CHILD_CHECK(syncd_wait(c, h, 10'000) == SYNCD_OK && v == 3, "%s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

// A request pending when the daemon is SIGKILLed: `wait` waits for it (rank 1 never comes).
using WaitFor = std::function<int(syncd_client*, syncd_handle)>;
void ExpectKilledDaemonFailsPendingWaitAndNextCallWithinOneSecond(const WaitFor& wait) {
  Daemon d(2);
  auto* t_kill = static_cast<std::atomic<double>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  pid_t client = Spawn([&] {
    syncd_client* c = Attach(d.run_dir(), 0, 2);
    CHILD_CHECK(c != nullptr, "attach");
    float a[4] = {};
    int64_t shape = 4;
    syncd_handle h;
    CHILD_CHECK(Submit(c, "pending", a, SYNCD_FLOAT32, 1, &shape, SYNCD_SUM, &h) == SYNCD_OK, "%s", syncd_last_error());
    const int rc = wait(c, h);  // rank 1 never comes; the daemon dies meanwhile
    const double wait_delay = NowS() - t_kill->load();
    CHILD_CHECK(rc == SYNCD_ERR_DAEMON_LOST, "wait: %s: %s", syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(wait_delay < 1.0, "pending wait failed %.2f s after the kill", wait_delay);
    const double t0 = NowS();
    const int rc2 = Submit(c, "next", a, SYNCD_FLOAT32, 1, &shape, SYNCD_SUM, &h);
    int rc3 = rc2 == SYNCD_OK ? syncd_wait(c, h, 5'000) : rc2;
    CHILD_CHECK(rc3 == SYNCD_ERR_DAEMON_LOST, "next call: %s: %s", syncd_status_name(rc3), syncd_last_error());
    CHILD_CHECK(NowS() - t0 < 1.0, "next call failed after %.2f s", NowS() - t0);
    CHILD_CHECK(Contains(syncd_last_error(), "gone"), "%s", syncd_last_error());
    syncd_shutdown(c);
    return 0;
  });
  usleep(300'000);
  t_kill->store(NowS());
  d.Kill(SIGKILL);
  const int status = WaitChild(client, 10'000);
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  munmap(t_kill, 4096);
}

TEST(Errors, KilledDaemonFailsPendingWaitAndNextCallWithinOneSecond) {
  ExpectKilledDaemonFailsPendingWaitAndNextCallWithinOneSecond(
      [](syncd_client* c, syncd_handle h) { return syncd_wait(c, h, 20'000); });
}

// As torch.distributed's progress thread waits (c10d_backend.cc): 20 ms at a time, shorter than
// the client's 50 ms between checks of the daemon. Each wait used to time out before any check,
// so the thread waited on a dead daemon for ever (DDP's backward with it).
TEST(Errors, KilledDaemonFailsAWaitInShortSlicesWithinOneSecond) {
  ExpectKilledDaemonFailsPendingWaitAndNextCallWithinOneSecond([](syncd_client* c, syncd_handle h) {
    int rc;
    const double t0 = NowS();
    while ((rc = syncd_wait(c, h, 20)) == SYNCD_ERR_TIMEOUT && NowS() - t0 < 20) {
    }
    return rc;
  });
}

TEST(Errors, WrongProtocolVersionIsRefusedWithBothVersions) {
  Daemon d(1);
  int fd = RawConnect(d.run_dir());
  ASSERT_GE(fd, 0);
  abi::AttachRequest req = RawAttachRequest(0, 1);
  req.version = 99;
  int fds[abi::kAttachFds];
  abi::AttachReply reply = RawAttach(fd, req, fds);
  close(fd);
  EXPECT_EQ(reply.status, SYNCD_ERR_PROTOCOL);
  EXPECT_TRUE(Contains(reply.message, "version 99")) << reply.message;
  EXPECT_TRUE(Contains(reply.message, "version " + std::to_string(abi::kVersion))) << reply.message;
  EXPECT_EQ(fds[0], -1) << "no segment for a refused client";
  ExpectDaemonServes(d, 1);
}

TEST(Errors, AttachIdentityConflictsAreRefused) {
  Daemon d(2);
  syncd_client* first = Attach(d.run_dir(), 0, 2);
  ASSERT_NE(first, nullptr);
  syncd_client* again = Attach(d.run_dir(), 0, 2);
  EXPECT_EQ(again, nullptr);
  EXPECT_TRUE(Contains(syncd_last_error(), "already attached")) << syncd_last_error();
  syncd_client* wrong_size = Attach(d.run_dir(), 1, 3);
  EXPECT_EQ(wrong_size, nullptr);
  EXPECT_TRUE(Contains(syncd_last_error(), "local size")) << syncd_last_error();
  syncd_shutdown(first);
}

TEST(Errors, ADaemonServesOneJobAtATime) {
  Daemon d(2);
  auto attach = [&](int rank, uint64_t job) {
    syncd_init_options o;
    syncd_init_options_default(&o);
    o.run_dir = d.run_dir().c_str();
    o.rank = o.local_rank = rank;
    o.size = o.local_size = 2;
    o.job_id = job;
    syncd_client* c = nullptr;
    syncd_init(&o, &c);
    return c;
  };
  syncd_client* a = attach(0, 111);
  ASSERT_NE(a, nullptr) << syncd_last_error();
  EXPECT_EQ(attach(1, 222), nullptr);
  EXPECT_TRUE(Contains(syncd_last_error(), "job 222") && Contains(syncd_last_error(), "serving job 111"))
      << syncd_last_error();
  syncd_shutdown(a);
  // Once job 111 is gone, job 222 may start; job 111's departed rank 0 does not block it.
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int) {
    int32_t v = rank;
    int64_t shape = 1;
    syncd_tensor t{"x", &v, SYNCD_INT32, 1, &shape, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 10'000) == SYNCD_OK,
                "%s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

// A rank that cannot take part in a collective says so (syncd_fail_async): the others' requests
// of that name fail naming it and why, on one node and across nodes, and the job goes on.
TEST(Errors, ARankThatCannotTakePartFailsTheOthersInsteadOfLeavingThemWaiting) {
  Cluster cluster(2, 2, {"--log-level", "error"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    float a[4] = {};
    int64_t shape = 4;
    syncd_handle h;
    if (rank == 3) {
      CHILD_CHECK(syncd_fail_async(c, "refused", "its tensor is a torch.BoolTensor", &h) == SYNCD_OK, "%s",
                  syncd_last_error());
    } else {
      CHILD_CHECK(Submit(c, "refused", a, SYNCD_FLOAT32, 1, &shape, SYNCD_SUM, &h) == SYNCD_OK, "%s", syncd_last_error());
    }
    const int rc = syncd_wait(c, h, 10'000);
    CHILD_CHECK(rc == SYNCD_ERR_MISMATCH, "rank %d: %s: %s", rank, syncd_status_name(rc), syncd_last_error());
    CHILD_CHECK(Contains(syncd_last_error(), "tensor 'refused': rank 3 could not take part: its tensor is a torch.BoolTensor"),
                "rank %d: %s", rank, syncd_last_error());
    CHILD_CHECK(Submit(c, "after", a, SYNCD_FLOAT32, 1, &shape, SYNCD_SUM, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_wait(c, h, 10'000) == SYNCD_OK, "rank %d: %s", rank, syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(Errors, OtherUsersAreRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  Daemon d(1);
  // Open the directory and socket so the refusal comes from the daemon's SO_PEERCRED check.
  chmod(d.run_dir().c_str(), 0755);
  chmod((d.run_dir() + "/attach.sock").c_str(), 0666);
  pid_t p = Spawn([&] {
    if (setgid(65534) != 0 || setuid(65534) != 0) return 2;
    syncd_client* c = Attach(d.run_dir(), 0, 1);
    CHILD_CHECK(c == nullptr, "another uid attached");
    CHILD_CHECK(Contains(syncd_last_error(), "uid 65534"), "%s", syncd_last_error());
    return 0;
  });
  const int st = WaitChild(p, 10'000);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ExpectDaemonServes(d, 1);
}

TEST(Errors, MalformedRingEntriesAreRefusedOneByOne) {
  Daemon d(1);
  RawClient raw(d.run_dir());
  struct Case {
    const char* what;
    std::function<void(abi::SubmitEntry&)> corrupt;
    int status;
    const char* expect;
  };
  const uint64_t arena = raw.arena_bytes();
  std::vector<Case> cases = {
      {"unknown kind", [](auto& e) { e.kind = 77; }, SYNCD_ERR_PROTOCOL, "unknown operation 77"},
      {"unterminated name", [](auto& e) { memset(e.name, 'x', sizeof(e.name)); }, SYNCD_ERR_PROTOCOL, "not terminated"},
      {"bad dtype", [](auto& e) { e.dtype = 42; }, SYNCD_ERR_PROTOCOL, "unknown dtype 42"},
      {"bad op", [](auto& e) { e.op = 9; }, SYNCD_ERR_PROTOCOL, "unknown reduce op 9"},
      {"too many dims", [](auto& e) { e.ndim = 9; }, SYNCD_ERR_PROTOCOL, "9 dimensions"},
      {"bytes disagree with shape", [](auto& e) { e.bytes = 20; }, SYNCD_ERR_PROTOCOL, "says 20 bytes"},
      {"offset out of arena", [arena](auto& e) { e.arena_offset = arena - 8; }, SYNCD_ERR_INVALID, "outside the client's arena"},
      {"too-large request", [arena](auto& e) { e.shape[0] = int64_t(arena); e.bytes = arena * 4; }, SYNCD_ERR_INVALID, "outside the client's arena"},
      {"broadcast root out of range", [](auto& e) { e.kind = 2; e.root = 5; }, SYNCD_ERR_INVALID, "root 5"},
      {"GPU descriptor out of arena", [arena](auto& e) { e.flags = abi::kSubmitGpu; e.arena_offset = arena - 8; },
       SYNCD_ERR_PROTOCOL, "GPU descriptor outside the arena"},
      {"unknown flags", [](auto& e) { e.flags = 6; }, SYNCD_ERR_PROTOCOL, "flags"},
  };
  uint64_t handle = 1;
  for (const Case& c : cases) {
    abi::SubmitEntry e = raw.Valid(handle);
    c.corrupt(e);
    raw.Push(e);
    auto [status, msg] = raw.Await(handle);
    EXPECT_EQ(status, c.status) << c.what << ": " << msg;
    EXPECT_TRUE(Contains(msg, c.expect)) << c.what << ": " << msg;
    ++handle;
  }
  // The same client, well-formed again, still works: one rank, so the sum is the input.
  abi::SubmitEntry ok = raw.Valid(handle);
  raw.Push(ok);
  EXPECT_EQ(raw.Await(handle).first, SYNCD_OK);
}

TEST(Errors, AGpuTensorForADaemonWithoutGpuCollectivesIsRefusedWithTheReason) {
  Daemon d(1, {"--gpus=none"});
  RawClient raw(d.run_dir());
  abi::SubmitEntry e = raw.Valid(1);
  e.flags = abi::kSubmitGpu;  // a zeroed GpuDescriptor at arena offset 0
  raw.Push(e);
  auto [status, msg] = raw.Await(1);
  EXPECT_EQ(status, SYNCD_ERR_INVALID) << msg;
  EXPECT_EQ(msg, "tensor 'raw.1' from rank 0 is a GPU tensor, but this syncd runs no GPU collectives: started with --gpus none");
  raw.Push(raw.Valid(2));
  EXPECT_EQ(raw.Await(2).first, SYNCD_OK) << "host tensors still work";
}

TEST(Errors, CorruptRingIndicesDisconnectOnlyThatClient) {
  Daemon d(2);
  {
    RawClient raw(d.run_dir(), 2);
    raw.header()->submit.head.value.store(123456);  // far beyond the ring's capacity
    raw.Kick();
    EXPECT_TRUE(raw.ClosedByDaemon(2.0)) << "the daemon must drop a client that corrupts its ring";
  }
  ExpectDaemonServes(d, 2);
}

}  // namespace
}  // namespace syncd::testing
