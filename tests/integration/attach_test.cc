// The attach socket under bad and hostile input: clients that say nothing, say too little, lie
// about who they are, or come faster than the engine takes them. Each gets an answer (or is
// dropped) without delaying anyone else, and the daemon keeps serving.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <climits>
#include <memory>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/attach_server.h"
#include "daemon/engine/engine.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_client.h"

namespace syncd::testing {
namespace {

// Issue 17, bug 5: the handshake used to be read connection by connection with a blocking 2 s
// timeout on the one attach thread, so every idle connection delayed every correct attach.
TEST(Attach, IdleConnectionsDelayNoOneAndAreRefusedAtTheirDeadline) {
  Daemon d(2);
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    const int fd = RawConnect(d.run_dir());
    ASSERT_GE(fd, 0) << "connection " << i;
    idle.push_back(fd);
  }
  const double seconds = ExpectDaemonServes(d, 2);
  EXPECT_LT(seconds, 1.0) << "300 idle connections delayed a correct attach";
  // Past 256 waiting handshakes the oldest is dropped; the others are answered once their 2 s
  // are up, naming what was missing.
  abi::AttachReply reply{};
  timeval tv{5, 0};
  setsockopt(idle[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ASSERT_EQ(recv(idle[0], &reply, sizeof(reply), MSG_WAITALL), ssize_t(sizeof(reply)));
  EXPECT_EQ(reply.status, SYNCD_ERR_REFUSED);
  EXPECT_TRUE(Contains(reply.message, "the oldest is dropped")) << reply.message;
  setsockopt(idle.back(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ASSERT_EQ(recv(idle.back(), &reply, sizeof(reply), MSG_WAITALL), ssize_t(sizeof(reply)));
  EXPECT_EQ(reply.status, SYNCD_ERR_PROTOCOL);
  EXPECT_TRUE(Contains(reply.message, "no complete attach request within 2 s")) << reply.message;
  for (int fd : idle) close(fd);
  EXPECT_LT(ExpectDaemonServes(d, 2), 1.0);
}

TEST(Attach, TruncatedAndGarbageHandshakesAreAnsweredAndTheDaemonServes) {
  Daemon d(1);
  {  // half a request, then the client goes away
    const int fd = RawConnect(d.run_dir());
    abi::AttachRequest req = RawAttachRequest(0, 1);
    ASSERT_EQ(send(fd, &req, sizeof(req) / 2, 0), ssize_t(sizeof(req) / 2));
    close(fd);
  }
  {  // a request-sized blob of garbage
    const int fd = RawConnect(d.run_dir());
    std::vector<char> junk(sizeof(abi::AttachRequest), '\x5a');
    ASSERT_EQ(send(fd, junk.data(), junk.size(), 0), ssize_t(junk.size()));
    abi::AttachReply reply{};
    ASSERT_EQ(recv(fd, &reply, sizeof(reply), MSG_WAITALL), ssize_t(sizeof(reply)));
    EXPECT_EQ(reply.status, SYNCD_ERR_PROTOCOL);
    EXPECT_TRUE(Contains(reply.message, "protocol version")) << reply.message;
    close(fd);
  }
  {  // a request sent one byte at a time is still a request
    const int fd = RawConnect(d.run_dir());
    abi::AttachRequest req = RawAttachRequest(0, 1);
    const char* p = reinterpret_cast<const char*>(&req);
    for (size_t i = 0; i < sizeof(req); ++i) ASSERT_EQ(send(fd, p + i, 1, 0), 1);
    abi::AttachReply reply{};
    ASSERT_EQ(recv(fd, &reply, sizeof(reply), MSG_WAITALL), ssize_t(sizeof(reply)));
    EXPECT_EQ(reply.status, SYNCD_OK) << reply.message;
    close(fd);
  }
  EXPECT_LT(ExpectDaemonServes(d, 1), 2.0);
}

// Issue 17, bug 4: with --local-size 0 the first client fixed the node's local size for good, so
// one absurd claim refused every correct client after it, and its first allreduce made the
// daemon allocate hundreds of gigabytes.
TEST(Attach, AnAbsurdLocalSizeIsRefusedAndFixesNothing) {
  Daemon d(0);
  const int fd = RawConnect(d.run_dir());
  abi::AttachRequest req{abi::kMagic, abi::kVersion, 0, INT_MAX, 0, INT_MAX, int32_t(getpid()), 0, 0};
  int fds[abi::kAttachFds];
  abi::AttachReply reply = RawAttach(fd, req, fds);
  close(fd);
  EXPECT_EQ(reply.status, SYNCD_ERR_INVALID);
  EXPECT_TRUE(Contains(reply.message, "local rank 0 of 2147483647 is not valid")) << reply.message;
  EXPECT_EQ(fds[0], -1);
  EXPECT_LT(ExpectDaemonServes(d, 3), 2.0);
}

TEST(Attach, TheLocalSizeAClientFixedEndsWithItsJob) {
  Daemon d(0);
  {
    RawClient five(d.run_dir(), 5);  // a job of 5 ranks on one node, gone after this block
  }
  EXPECT_LT(ExpectDaemonServes(d, 2), 2.0) << "a job of 2 ranks after one of 5";
}

TEST(Attach, RanksOutOfRangeAreRefusedNamingTheRank) {
  Daemon d(2);
  for (auto [rank, size, local_rank] : {std::tuple{2, 2, 0}, {-1, 2, 0}, {1, 2, 0}, {0, 2, 2}}) {
    const int fd = RawConnect(d.run_dir());
    abi::AttachRequest req{abi::kMagic, abi::kVersion, rank, size, local_rank, 2, int32_t(getpid()), 0, 0};
    int fds[abi::kAttachFds];
    abi::AttachReply reply = RawAttach(fd, req, fds);
    close(fd);
    EXPECT_NE(reply.status, SYNCD_OK) << rank << "/" << size << " local " << local_rank;
    EXPECT_TRUE(Contains(reply.message, "rank " + std::to_string(rank))) << reply.message;
  }
  EXPECT_LT(ExpectDaemonServes(d, 2), 2.0);
}

// A segment handed back (abi::kAttachHandBack, syncd_reattach) is mapped only when it is what
// this daemon would make: a memfd sealed against resizing (it could not shrink under the daemon),
// of the size and layout this daemon's options give. Anything else is refused naming why, the
// descriptor closed, and the daemon serves on.
TEST(Attach, ASegmentHandedBackIsMappedOnlyWhenItIsWhatTheDaemonWouldMake) {
  Daemon d(0);
  uint64_t bytes = 0;
  {
    RawClient probe(d.run_dir());
    bytes = probe.header()->segment_bytes;
  }
  auto hand_back = [&](int pass_fd, uint32_t flags = abi::kAttachHandBack) {
    const int fd = RawConnect(d.run_dir());
    abi::AttachRequest req = RawAttachRequest(0, 1);
    req.flags = flags;
    int fds[abi::kAttachFds];
    abi::AttachReply reply = RawAttach(fd, req, fds, pass_fd);
    close(fd);
    for (int f : fds)
      if (f >= 0) close(f);
    EXPECT_NE(reply.status, SYNCD_OK);
    return std::string(reply.message);
  };
  auto memfd = [](uint64_t size, bool sealed) {
    const int fd = memfd_create("handed-back", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_EQ(ftruncate(fd, off_t(size)), 0);
    if (sealed) {
      EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    }
    return fd;
  };
  EXPECT_TRUE(Contains(hand_back(-1), "hands its segment back but sent no descriptor")) << hand_back(-1);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const std::string pipe_msg = hand_back(pipe_fds[0]);
  EXPECT_TRUE(Contains(pipe_msg, "not a sealed shared-memory file")) << pipe_msg;
  const int unsealed = memfd(bytes, false), wrong_size = memfd(bytes - 4096, true), zeros = memfd(bytes, true);
  const std::string unsealed_msg = hand_back(unsealed), size_msg = hand_back(wrong_size), zeros_msg = hand_back(zeros);
  EXPECT_TRUE(Contains(unsealed_msg, "not sealed against resizing")) << unsealed_msg;
  EXPECT_TRUE(Contains(size_msg, "holds " + std::to_string(bytes - 4096) + " bytes, not " + std::to_string(bytes)))
      << size_msg;
  EXPECT_TRUE(Contains(zeros_msg, "another layout than this daemon makes")) << zeros_msg;
  const std::string flags_msg = hand_back(-1, 4);
  EXPECT_TRUE(Contains(flags_msg, "attach flags 4 are not known")) << flags_msg;
  for (int fd : {pipe_fds[0], pipe_fds[1], unsealed, wrong_size, zeros}) close(fd);
  EXPECT_LT(ExpectDaemonServes(d, 2), 2.0);
}

// syncd_reattach is for a client whose daemon is gone: while it serves, it is refused and the
// client goes on as it was.
TEST(Attach, ReattachingWhileTheDaemonServesIsRefusedAndChangesNothing) {
  Daemon d(0);
  syncd_client* c = AttachAs(d.run_dir(), 0, 1, 0, 1);
  ASSERT_NE(c, nullptr) << syncd_last_error();
  EXPECT_EQ(syncd_reattach(c, 100), SYNCD_ERR_INVALID);
  EXPECT_TRUE(Contains(syncd_last_error(), "is still serving it")) << syncd_last_error();
  float* x = static_cast<float*>(syncd_alloc(c, 16));
  for (int i = 0; i < 4; ++i) x[i] = 1.f;
  const int64_t shape[1] = {4};
  syncd_tensor t{"after.reattach", x, SYNCD_FLOAT32, 1, shape, 0};
  syncd_handle h;
  ASSERT_EQ(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h), SYNCD_OK) << syncd_last_error();
  EXPECT_EQ(syncd_wait(c, h, 5000), SYNCD_OK) << syncd_last_error();
  EXPECT_EQ(x[0], 1.f);
  syncd_shutdown(c);
}

// A forked child's copy of the client (os.fork() in a training script, a worker that exits
// through sys.exit and runs syncd.torch's atexit) says nothing to the daemon when it leaves or
// shuts down: the socket is the parent's. A goodbye from the child would make the parent's later
// death look like a clean detach (its peers would then wait out the rejoin grace).
TEST(Attach, AForkedChildsLeaveAndShutdownSayNothingForTheParent) {
  Daemon d(0, {"--log-level", "info"});
  const pid_t parent = Spawn([&] {
    syncd_client* c = AttachAs(d.run_dir(), 0, 1, 0, 1);
    CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
    const pid_t child = Spawn([c] {
      syncd_leave(c);
      syncd_shutdown(c);
      return 0;
    });
    const int st = WaitChild(child, 10'000);
    CHILD_CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    float x[4] = {1.f, 2.f, 3.f, 4.f};
    const int64_t shape[1] = {4};
    syncd_tensor t{"after.fork", x, SYNCD_FLOAT32, 1, shape, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK && syncd_wait(c, h, 5000) == SYNCD_OK,
                "%s", syncd_last_error());
    _exit(0);  // the parent dies without a goodbye
  });
  const int st = WaitChild(parent, 20'000);
  ASSERT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  std::string log;
  for (int i = 0; i < 200 && !Contains(log = d.Log(), " detach"); ++i) usleep(10'000);
  EXPECT_TRUE(Contains(log, "rank 0 (pid " + std::to_string(parent) + ") exited without detaching")) << log;
}

// The client side of bug 5: a daemon that accepts but never answers must not hang the client.
TEST(Attach, TheClientGivesUpOnADaemonThatNeverAnswers) {
  char templ[] = "/tmp/syncd-mute-XXXXXX";
  const std::string dir = mkdtemp(templ);
  const int listener = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/attach.sock", dir.c_str());
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  const double t0 = NowS();
  syncd_client* c = Attach(dir, 0, 1);  // 5 s attach timeout
  const double waited = NowS() - t0;
  EXPECT_EQ(c, nullptr);
  EXPECT_TRUE(Contains(syncd_last_error(), "did not answer within 5000 ms")) << syncd_last_error();
  EXPECT_GT(waited, 4.5);
  EXPECT_LT(waited, 7.0);
  close(listener);
  unlink(addr.sun_path);
  rmdir(dir.c_str());
}

// An attach server and an engine in this process; the test decides when (and whether) the
// engine runs.
class InProcessDaemon {
 public:
  explicit InProcessDaemon(uint32_t local_size) {
    char templ[] = "/tmp/syncd-inbox-XXXXXX";
    config_.run_dir = mkdtemp(templ);
    config_.local_size = local_size;
    config_.log_level = "error";
    auto page = NodePage::Create();
    EXPECT_TRUE(page.ok());
    page_ = std::make_unique<NodePage>(std::move(page.value()));
    attach_ = std::make_unique<AttachServer>(config_, page_.get());
    EXPECT_TRUE(attach_->Listen().ok());
    engine_ = std::make_unique<Engine>(config_, page_.get(), local_size,
                                       [this](uint32_t id) { attach_->KickClient(id); });
    attach_->set_engine(engine_.get());
    attach_thread_ = std::thread([this] { attach_->Run(); });
  }
  ~InProcessDaemon() {
    if (engine_thread_.joinable()) {
      engine_->Stop();
      engine_thread_.join();
    }
    StopAttach();
  }
  const std::string& run_dir() const { return config_.run_dir; }
  Engine& engine() { return *engine_; }
  void StartEngine() { engine_thread_ = std::thread([this] { engine_->Run(); }); }
  void StopAttach() {
    if (!attach_thread_.joinable()) return;
    attach_->Stop();
    attach_thread_.join();
  }
  // Attaches as local rank `local_rank` and leaves at once (two events for the engine).
  void AttachAndLeave(int local_rank, int local_size) {
    const int fd = RawConnect(config_.run_dir);
    int fds[abi::kAttachFds];
    abi::AttachReply reply = RawAttach(fd, RawAttachRequest(local_rank, local_size), fds);
    EXPECT_EQ(reply.status, SYNCD_OK) << reply.message;
    for (int f : fds)
      if (f >= 0) close(f);
    close(fd);
  }

 private:
  Config config_;
  std::unique_ptr<NodePage> page_;
  std::unique_ptr<AttachServer> attach_;
  std::unique_ptr<Engine> engine_;
  std::thread attach_thread_, engine_thread_;
};

// Issue 17, bug 3: events the engine had no room for were destroyed (Engine::Post took them by
// value) and the retry posted an empty one; a stopping daemon waited for the engine for ever.
// Here the engine does not run at all while 150 clients attach and leave (300 events, the
// inbox holds 256): every event must reach it once it runs.
TEST(Attach, EventsTheEngineHasNoRoomForWaitAndNoneIsLost) {
  InProcessDaemon d(2);
  RawClient stays(d.run_dir(), 2);  // local rank 0, attached throughout
  for (int i = 0; i < 150 && !HasFailure(); ++i) d.AttachAndLeave(1, 2);
  d.StartEngine();
  // Every event arrives, in order: rank 1 came and went 150 times, rank 0 is still attached.
  std::shared_ptr<const StatusSnapshot> s;
  for (int i = 0; i < 200; ++i) {
    s = d.engine().FreshSnapshot(100);
    if (s->clients.size() == 2 && s->clients[1].state == "lost") break;
    usleep(20'000);
  }
  ASSERT_EQ(s->clients.size(), 2u);
  EXPECT_EQ(s->clients[0].state, "attached");
  EXPECT_EQ(s->clients[1].state, "lost");
}

TEST(Attach, AStoppingAttachServerDoesNotWaitForAnEngineThatTakesNothing) {
  InProcessDaemon d(1);
  for (int i = 0; i < 150 && !HasFailure(); ++i) d.AttachAndLeave(0, 1);  // 300 events, no engine
  const double t0 = NowS();
  d.StopAttach();
  EXPECT_LT(NowS() - t0, 1.0);
}

}  // namespace
}  // namespace syncd::testing
