// syncd-soak: one rank of a long job, run by every rank under syncrun (bench/soak.sh drives it and
// samples the daemons). Small allreduces back to back, a larger one of a cycling size every
// --big-every operations, and a detach/attach cycle (syncd_shutdown, syncd_init: what
// hvd.shutdown(); hvd.init() does) every --reattach-every operations. Every result is checked.
//   syncrun -N 2 -n 4 -- syncd-soak --ops 1000000 [--big-every 1000] [--reattach-every 100000]
// Rank 0 writes how many operations it has done to --progress FILE now and then.
#include <syncd/client.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void Die(const std::string& what) {
  fprintf(stderr, "syncd-soak: %s: %s\n", what.c_str(), syncd_last_error());
  exit(1);
}

struct Options {
  uint64_t ops = 1'000'000;
  uint64_t big_every = 1000;
  uint64_t reattach_every = 100'000;
  std::string progress;
};

class Soak {
 public:
  explicit Soak(const Options& o) : o_(o) { Attach(); }
  ~Soak() { syncd_shutdown(c_); }

  void Run() {
    const uint64_t report_every = std::max<uint64_t>(1, o_.ops / 1000);
    for (uint64_t i = 0; i < o_.ops; ++i) {
      if (o_.reattach_every && i > 0 && i % o_.reattach_every == 0) Reattach();
      if (o_.big_every && i % o_.big_every == o_.big_every - 1) {
        static const uint64_t kBig[] = {1 << 10, 64 << 10, 1 << 20, 4 << 20};
        Allreduce("soak.big." + std::to_string(big_ % 4), kBig[big_ % 4] / 4);
        ++big_;
      } else {
        Allreduce("soak.small." + std::to_string(i % 8), 4);
      }
      if (rank_ == 0 && !o_.progress.empty() && (i + 1) % report_every == 0) WriteProgress(i + 1);
    }
  }

 private:
  void Attach() {
    if (syncd_init(nullptr, &c_) != SYNCD_OK) Die("attach");
    rank_ = syncd_rank(c_);
    size_ = syncd_size(c_);
    // Room for the largest tensor, allocated in the arena once per attach (zero copy).
    buf_ = static_cast<float*>(syncd_alloc(c_, 4 << 20));
    if (buf_ == nullptr) Die("arena");
  }

  void Reattach() {
    syncd_shutdown(c_);
    Attach();
  }

  void Allreduce(const std::string& name, uint64_t count) {
    for (uint64_t k = 0; k < count; ++k) buf_[k] = float(rank_ + 1);
    int64_t shape = int64_t(count);
    syncd_tensor t{name.c_str(), buf_, SYNCD_FLOAT32, 1, &shape, 0};
    syncd_handle h;
    if (syncd_allreduce_async(c_, &t, SYNCD_SUM, 1, 1, &h) != SYNCD_OK) Die(name);
    if (syncd_wait(c_, h, 60'000) != SYNCD_OK) Die(name);
    const float want = float(size_) * float(size_ + 1) / 2;
    if (buf_[0] != want || buf_[count - 1] != want) {
      fprintf(stderr, "syncd-soak: %s: %g, expected %g\n", name.c_str(), buf_[0], want);
      exit(1);
    }
  }

  void WriteProgress(uint64_t done) {
    const std::string tmp = o_.progress + ".tmp";
    if (FILE* f = fopen(tmp.c_str(), "w")) {
      fprintf(f, "%llu\n", (unsigned long long)done);
      fclose(f);
      rename(tmp.c_str(), o_.progress.c_str());
    }
  }

  Options o_;
  syncd_client* c_ = nullptr;
  float* buf_ = nullptr;
  int rank_ = 0, size_ = 1;
  uint64_t big_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"syncd-soak: a long job of small and large allreduces and attach cycles (bench/soak.sh)"};
  Options o;
  app.add_option("--ops", o.ops, "Allreduces per rank");
  app.add_option("--big-every", o.big_every, "One of 1 KiB, 64 KiB, 1 MiB, 4 MiB (in turn) every this many; 0: none");
  app.add_option("--reattach-every", o.reattach_every, "Detach and attach again every this many; 0: never");
  app.add_option("--progress", o.progress, "Rank 0 writes the operations done so far to this file");
  CLI11_PARSE(app, argc, argv);
  Soak(o).Run();
  return 0;
}
