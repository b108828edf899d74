#include "daemon/obs/timeline_writer.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <charconv>
#include <cinttypes>
#include <cstring>

#include "daemon/collectives/collective.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

// Thread ids of the daemon's stages (ranks use their global rank).
constexpr uint32_t kCoordTid = 1'000'000, kExecTid = 2'000'000, kNetTid = 3'000'000, kGpuTid = 4'000'000,
                   kPartialTid = 5'000'000;

std::string Json(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (uint8_t(c) < 0x20) {
      char u[8];
      snprintf(u, sizeof(u), "\\u%04x", unsigned(uint8_t(c)));
      out += u;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Kind(uint8_t k) { return k ? OpKindName(abi::OpKind(k)) : "?"; }

}  // namespace

namespace {

// FileOwner's rule: the file `path` opened for writing (truncated) as `owner` could, or why not.
StatusOr<int> OpenAsOwner(const std::string& path, const FileOwner& owner) {
  const auto refused = [&](const std::string& why) {
    return Status(SYNCD_ERR_INVALID, "timeline file '" + path + "': " + why);
  };
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") return refused("not a file name");
  const int dfd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return refused("its directory cannot be opened: " + std::string(strerror(errno)));
  struct stat ds {};
  if (fstat(dfd, &ds) != 0 || ds.st_uid != owner.uid) {
    close(dfd);
    return refused("a node service writes a job's timeline only into a directory of the job's user (uid " +
                   std::to_string(owner.uid) + "); " + dir + " is uid " + std::to_string(ds.st_uid) + "'s");
  }
  bool made = true;
  int fd = openat(dfd, base.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0 && errno == EEXIST) {
    made = false;
    fd = openat(dfd, base.c_str(), O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  }
  const int err = errno;
  close(dfd);
  if (fd < 0) return refused(err == ELOOP ? "a symbolic link (not followed)" : "cannot be created: " + std::string(strerror(err)));
  struct stat fs {};
  if (fstat(fd, &fs) != 0 || !S_ISREG(fs.st_mode) || (!made && fs.st_uid != owner.uid) || fs.st_nlink != 1) {
    close(fd);
    return refused("it exists and is not a plain file of the job's user (uid " + std::to_string(owner.uid) + ")");
  }
  // Handed to the user (root can; a daemon of its own user leaves it its own, readable by the group).
  if (made && fchown(fd, owner.uid, owner.gid ? *owner.gid : gid_t(-1)) != 0) (void)fchmod(fd, 0644);
  if (!made && ftruncate(fd, 0) != 0) {
    close(fd);
    return refused("cannot be truncated: " + std::string(strerror(errno)));
  }
  (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

StatusOr<std::unique_ptr<TimelineWriter>> TimelineWriter::Open(const std::string& path, uint64_t max_bytes,
                                                               uint64_t start_ns, const std::optional<FileOwner>& owner) {
  FILE* f = nullptr;
  if (owner) {
    StatusOr<int> fd = OpenAsOwner(path, *owner);
    if (!fd.ok()) return fd.status();
    f = fdopen(*fd, "w");
    if (f == nullptr) close(*fd);
  } else {
    f = fopen(path.c_str(), "w");
  }
  if (f == nullptr)
    return Status(SYNCD_ERR_INVALID, "timeline file '" + path + "' cannot be created: " + strerror(errno));
  return std::unique_ptr<TimelineWriter>(new TimelineWriter(path, f, max_bytes, start_ns));
}

TimelineWriter::TimelineWriter(std::string path, FILE* file, uint64_t max_bytes, uint64_t start_ns)
    : path_(std::move(path)), file_(file), max_bytes_(max_bytes), start_ns_(start_ns) {
  offsets_[0] = 0;
  thread_ = std::thread([this] { Run(); });
  // Formatting and writing run when the daemon's cores have nothing else to do (SCHED_IDLE): the
  // engine never waits for them, and the queue absorbs what comes meanwhile (Boost).
  boosted_ = true;
  Boost(false);
}

TimelineWriter::~TimelineWriter() {
  Finish();
  thread_.join();
}

void TimelineWriter::Boost(bool on) {
  // Idle priority while it keeps up; normal when the queue fills or the file must be finished.
  if (boosted_.exchange(on, std::memory_order_acq_rel) == on) return;
  sched_param p{};
  pthread_setschedparam(thread_.native_handle(), on ? SCHED_OTHER : SCHED_IDLE, &p);
}

bool TimelineWriter::Push(std::shared_ptr<TraceChunk> chunk) {
  const uint64_t depth = pushed_.load(std::memory_order_relaxed) - popped_.load(std::memory_order_acquire);
  if (depth > kQueueChunks / 2) Boost(true);
  if (queue_.Push(Item(std::move(chunk)))) {
    pushed_.fetch_add(1, std::memory_order_release);
    return true;
  }
  queue_drops_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void TimelineWriter::SetClock(uint32_t node, int64_t offset_ns, uint64_t error_ns) {
  (void)queue_.Push(Item(Clock{node, offset_ns, error_ns}));  // full: the previous estimate stays
}

void TimelineWriter::SetHost(uint32_t node, const std::string& host) { (void)queue_.Push(Item(Host{node, host})); }

void TimelineWriter::Finish() {
  if (finishing_.exchange(true, std::memory_order_acq_rel)) return;
  Boost(true);  // what is queued is written now, not when the cores are idle
}

TimelineWriter::Stats TimelineWriter::stats() const {
  Stats s;
  s.events = events_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  s.cut_by_cap = cut_.load(std::memory_order_relaxed);
  s.queue_drops = queue_drops_.load(std::memory_order_relaxed);
  return s;
}

void TimelineWriter::Run() {
  setvbuf(file_, nullptr, _IOFBF, 1 << 20);
  fputs("[\n", file_);
  bytes_ = 2;
  Emit("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"node 0\"}}");
  processes_.insert(0);
  for (;;) {
    const bool finishing = finishing_.load(std::memory_order_acquire);  // before the last look at the queue
    std::optional<Item> item = queue_.Pop();
    if (!item) {
      if (finishing) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    if (auto* c = std::get_if<std::shared_ptr<TraceChunk>>(&*item)) {
      Write(**c);
      const uint64_t popped = popped_.fetch_add(1, std::memory_order_acq_rel) + 1;
      if (!finishing && boosted_.load(std::memory_order_acquire) &&
          pushed_.load(std::memory_order_acquire) - popped < kQueueChunks / 8)
        Boost(false);
    } else if (auto* k = std::get_if<Clock>(&*item)) {
      offsets_[k->node] = k->offset_ns;
      char line[256];
      snprintf(line, sizeof(line),
               "{\"name\":\"clock sync\",\"ph\":\"i\",\"s\":\"p\",\"ts\":0,\"pid\":%u,\"tid\":0,\"args\":{\"offset_us\":%.3f,"
               "\"error_bound_us\":%.3f,\"method\":\"min-RTT ping from node 0\"}}",
               k->node, double(k->offset_ns) / 1e3, double(k->error_ns) / 1e3);
      Emit(line);
    } else if (auto* h = std::get_if<Host>(&*item)) {
      processes_.insert(h->node);
      Emit("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(h->node) + ",\"tid\":0,\"args\":{\"name\":" +
           Json("node " + std::to_string(h->node) + " (" + h->name + ")") + "}}");
    }
  }
  if (capped_) {
    char line[256];
    snprintf(line, sizeof(line), "\n{\"name\":\"timeline cut: the file reached its size cap\",\"ph\":\"i\",\"s\":\"g\",\"ts\":0,"
             "\"pid\":0,\"tid\":0,\"args\":{\"events_cut\":%" PRIu64 "}}", cut_.load());
    fputs(line, file_);
  }
  fputs("\n]\n", file_);
  fclose(file_);
  file_ = nullptr;
  done_.store(true, std::memory_order_release);
}

void TimelineWriter::Emit(const std::string& line) { Emit(line.data(), line.size()); }

void TimelineWriter::Emit(const char* line, size_t n) {
  if (capped_ || bytes_.load(std::memory_order_relaxed) + n + 2 > max_bytes_) {
    capped_ = true;
    cut_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!first_) fwrite(",\n", 1, 2, file_);
  first_ = false;
  fwrite(line, 1, n, file_);
  bytes_.fetch_add(n + 2, std::memory_order_relaxed);
}

void TimelineWriter::Thread(uint32_t node, uint32_t tid, const std::string& name) {
  if (!threads_.insert({node, tid}).second) return;
  if (processes_.insert(node).second)
    Emit("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(node) +
         ",\"tid\":0,\"args\":{\"name\":\"node " + std::to_string(node) + "\"}}");
  const std::string head = "{\"ph\":\"M\",\"pid\":" + std::to_string(node) + ",\"tid\":" + std::to_string(tid);
  Emit(head + ",\"name\":\"thread_name\",\"args\":{\"name\":" + Json(name) + "}}");
  // Daemon stages above the ranks, in stage order.
  Emit(head + ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":" +
       std::to_string(tid >= kCoordTid ? int64_t(tid / 1000) - 10'000 : int64_t(tid)) + "}}");
}

// One event's JSON, built in place (the writer formats tens of thousands a second).
class TimelineWriter::Line {
 public:
  Line& Raw(const char* s) { return Raw(s, strlen(s)); }
  Line& Raw(const char* s, size_t n) {
    n = std::min(n, sizeof(buf_) - 1 - n_);
    memcpy(buf_ + n_, s, n);
    n_ += n;
    return *this;
  }
  Line& Raw(const std::string& s) { return Raw(s.data(), s.size()); }
  Line& Int(int64_t v) {
    if (sizeof(buf_) - n_ > 24) n_ = size_t(std::to_chars(buf_ + n_, buf_ + sizeof(buf_), v).ptr - buf_);
    return *this;
  }
  // Microseconds with three decimals, from nanoseconds.
  Line& Micros(int64_t ns) {
    if (ns < 0) {
      Raw("-");
      ns = -ns;
    }
    Int(ns / 1000);
    char frac[4] = {'.', char('0' + ns % 1000 / 100), char('0' + ns % 100 / 10), char('0' + ns % 10)};
    return Raw(frac, 4);
  }
  const char* data() const { return buf_; }
  size_t size() const { return n_; }

 private:
  char buf_[4096];
  size_t n_ = 0;
};

int64_t TimelineWriter::Ns(uint32_t node, uint64_t ns) const {
  const auto it = offsets_.find(node);
  return int64_t(ns) - (it == offsets_.end() ? 0 : it->second) - int64_t(start_ns_);
}

void TimelineWriter::Write(const TraceChunk& chunk) {
  const TraceChunk::Header& h = chunk.header();
  if (h.magic != TraceChunk::Header{}.magic || h.used > TraceChunk::kPayload) return;  // not a chunk: nothing to trust
  auto& names = names_[h.node];
  const char* p = chunk.bytes + sizeof(TraceChunk::Header);
  const char* end = p + h.used;
  while (p + sizeof(TraceEvent) <= end) {
    TraceEvent e;
    memcpy(&e, p, sizeof(e));
    p += sizeof(e);
    if (e.kind == TraceKind::kName) {
      const size_t padded = (e.bytes + 7) / 8 * 8;
      if (e.bytes > 1024 || p + padded > end) break;
      names[e.name] = Name{std::string(p, e.bytes), Json(std::string(p, e.bytes))};
      p += padded;
      continue;
    }
    static const Name kNone;
    const auto n = names.find(e.name);
    Event(h.node, e, n == names.end() ? kNone : n->second);
  }
}

void TimelineWriter::SubmitEvent(uint32_t node, const TraceEvent& e, const Name& name) {
  Thread(node, uint32_t(e.rank), "rank " + std::to_string(e.rank));
  Line l;
  l.Raw("{\"name\":\"submit ").Raw(name.json.empty() ? "" : name.json.c_str() + 1)  // "submit <name>"
      .Raw(name.json.empty() ? "\"" : "").Raw(",\"ph\":\"i\",\"s\":\"t\",\"ts\":").Micros(Ns(node, e.t0))
      .Raw(",\"pid\":").Int(node).Raw(",\"tid\":").Int(e.rank).Raw(",\"args\":{\"kind\":\"").Raw(Kind(e.op_kind))
      .Raw("\",\"bytes\":").Int(int64_t(e.bytes)).Raw("}}");
  Emit(l.data(), l.size());
}

void TimelineWriter::TensorEvent(uint32_t node, const TraceEvent& e, const Name& name) {
  const uint64_t id = next_id_++;
  Line l;
  auto head = [&](const char* phase_json, const char* ph, uint64_t t) {
    l.Raw("{\"name\":").Raw(phase_json).Raw(",\"ph\":\"").Raw(ph).Raw("\",\"ts\":").Micros(Ns(node, t))
        .Raw(",\"cat\":\"tensor\",\"id\":").Int(int64_t(id)).Raw(",\"pid\":").Int(node).Raw(",\"tid\":0");
  };
  auto emit = [&] {
    Emit(l.data(), l.size());
    l = Line();
  };
  const char* tensor = name.json.empty() ? "\"?\"" : name.json.c_str();
  head(tensor, "b", e.t0);
  l.Raw(",\"args\":{\"kind\":\"").Raw(Kind(e.op_kind)).Raw("\",\"process_set\":").Int(e.set).Raw(",\"bytes\":")
      .Int(int64_t(e.bytes)).Raw(",\"dtype\":\"").Raw(abi::DtypeName(e.dtype)).Raw("\",\"fusion_group\":")
      .Int(e.group).Raw(",\"ranks_here\":").Int(e.count).Raw(",\"status\":\"").Raw(e.failed ? "failed" : "ok")
      .Raw("\"}}");
  emit();
  // The phases that apply (a name run on one node is never negotiated: no agreement time).
  const uint64_t marks[] = {e.t0, e.t2, e.t3 ? e.t3 : e.t2, e.t4 ? e.t4 : (e.t3 ? e.t3 : e.t2), e.t1};
  static const char* const kPhases[] = {"\"WAIT_FOR_RANKS\"", "\"NEGOTIATE\"", "\"QUEUE\"", "\"EXECUTE\""};
  for (int i = 0; i < 4; ++i) {
    if (marks[i] == 0 || marks[i + 1] <= marks[i] || marks[i + 1] > e.t1) continue;
    head(kPhases[i], "b", marks[i]);
    l.Raw("}");
    emit();
    head(kPhases[i], "e", marks[i + 1]);
    l.Raw("}");
    emit();
  }
  head(tensor, "e", e.t1);
  l.Raw("}");
  emit();
}

void TimelineWriter::Event(uint32_t node, const TraceEvent& e, const Name& name) {
  events_.fetch_add(1, std::memory_order_relaxed);
  const std::string set = std::to_string(e.set);
  Line l;
  // A complete event ("X") on thread `tid`; the caller adds its args and closes them.
  auto span = [&](uint32_t tid) -> Line& {
    return l.Raw(",\"ph\":\"X\",\"ts\":").Micros(Ns(node, e.t0)).Raw(",\"dur\":")
        .Micros(e.t1 > e.t0 ? int64_t(e.t1 - e.t0) : 0).Raw(",\"pid\":").Int(node).Raw(",\"tid\":").Int(tid)
        .Raw(",\"args\":{");
  };
  auto emit = [&] {
    Emit(l.data(), l.size());
    l = Line();
  };
  switch (e.kind) {
    case TraceKind::kSubmit:
      SubmitEvent(node, e, name);
      break;
    case TraceKind::kTensor:
      TensorEvent(node, e, name);
      break;
    case TraceKind::kCycle:
      Thread(node, kCoordTid + uint32_t(e.set), "coordination (set " + set + ")");
      l.Raw("{\"name\":\"cycle ").Int(e.group).Raw("\"");
      span(kCoordTid + uint32_t(e.set)).Raw("\"cycle\":").Int(e.group).Raw(",\"tensors\":").Int(e.count).Raw("}}");
      emit();
      break;
    case TraceKind::kGroup:
      Thread(node, kExecTid + uint32_t(e.set), "execution (set " + set + ")");
      l.Raw("{\"name\":\"").Raw(Kind(e.op_kind)).Raw(" x").Int(e.count).Raw("\"");
      span(kExecTid + uint32_t(e.set)).Raw("\"tensors\":").Int(e.count).Raw(",\"bytes\":").Int(int64_t(e.bytes))
          .Raw(",\"fusion_group\":").Int(e.group);
      if (!name.json.empty()) l.Raw(",\"first\":").Raw(name.json);
      l.Raw("}}");
      emit();
      break;
    case TraceKind::kReduce:
    case TraceKind::kScatter:
      Thread(node, kExecTid + uint32_t(e.set), "execution (set " + set + ")");
      l.Raw(e.kind == TraceKind::kReduce ? "{\"name\":\"reduce into fusion buffer\"" : "{\"name\":\"copy back\"");
      span(kExecTid + uint32_t(e.set)).Raw("\"bytes\":").Int(int64_t(e.bytes)).Raw("}}");
      emit();
      break;
    case TraceKind::kNetwork: {
      const uint32_t tid = kNetTid + uint32_t(e.set) * 16 + e.count % 16;
      Thread(node, tid, "network (set " + set + ", slot " + std::to_string(e.count) + ")");
      l.Raw("{\"name\":\"inter-node ").Raw(Kind(e.op_kind)).Raw("\"");
      span(tid).Raw("\"bytes\":").Int(int64_t(e.bytes)).Raw("}}");
      emit();
      break;
    }
    case TraceKind::kGpu:
      Thread(node, kGpuTid, "gpu");
      l.Raw("{\"name\":\"NCCL ").Raw(Kind(e.op_kind)).Raw(" x").Int(e.count).Raw("\"");
      span(kGpuTid).Raw("\"tensors\":").Int(e.count).Raw(",\"bytes\":").Int(int64_t(e.bytes)).Raw("}}");
      emit();
      break;
    case TraceKind::kPartialRound:
      Thread(node, kPartialTid + uint32_t(e.set), "partial (set " + set + ")");
      l.Raw("{\"name\":").Raw(Json("partial round " + name.text));
      span(kPartialTid + uint32_t(e.set)).Raw("\"round\":").Int(e.group).Raw(",\"nap\":").Int(e.count).Raw("}}");
      emit();
      break;
    case TraceKind::kPlanGroup:
      Thread(node, kExecTid + uint32_t(e.set), "execution (set " + set + ")");
      l.Raw("{\"name\":\"TOPO group ").Int(e.group).Raw("\",\"ph\":\"i\",\"s\":\"t\",\"ts\":").Micros(Ns(node, e.t0))
          .Raw(",\"pid\":").Int(node).Raw(",\"tid\":").Int(kExecTid + uint32_t(e.set)).Raw("}");
      emit();
      break;
    case TraceKind::kMark:
    case TraceKind::kName:
      l.Raw("{\"name\":").Raw(name.json.empty() ? "\"?\"" : name.json).Raw(",\"ph\":\"i\",\"s\":\"p\",\"ts\":")
          .Micros(Ns(node, e.t0)).Raw(",\"pid\":").Int(node).Raw(",\"tid\":0}");
      emit();
      break;
  }
}

}  // namespace syncd
