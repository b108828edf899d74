#include "daemon/coord/wire.h"

#include <algorithm>
#include <cstring>

#include "daemon/base/version.h"
#include "daemon/collectives/collective.h"

namespace syncd {
namespace {

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void Str(const std::string& s) {
    Put<uint32_t>(uint32_t(s.size()));
    out_ += s;
  }
  void Meta(const TensorMeta& m) {
    Put(m.kind);
    Put(m.dtype);
    Put(m.op);
    Put(m.gpu);
    Put(m.arg);
    Put(m.prescale);
    Put(m.postscale);
    Put(m.compression);
    Put(m.compression_ppm);
    Put(m.absent);
    Put<uint32_t>(uint32_t(m.shape.size()));
    for (int64_t d : m.shape) Put(d);
    Ints(m.rows);
    Ints(m.splits);
  }
  void Ints(const std::vector<int64_t>& v) {
    Put<uint32_t>(uint32_t(v.size()));
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > s_.size()) return false;
    memcpy(v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool Str(std::string* v) {
    uint32_t n;
    if (!Get(&n) || pos_ + n > s_.size()) return false;
    v->assign(s_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool Meta(TensorMeta* m) {
    uint32_t dims;
    if (!(Get(&m->kind) && Get(&m->dtype) && Get(&m->op) && Get(&m->gpu) && Get(&m->arg) && Get(&m->prescale) &&
          Get(&m->postscale) && Get(&m->compression) && Get(&m->compression_ppm) && Get(&m->absent) && Get(&dims)) ||
        dims > abi::kMaxDims)
      return false;
    // Only what a daemon's own checks let through (submission.h): anything else is not ours.
    if (m->kind < uint32_t(abi::OpKind::kAllreduce) || m->kind > abi::kOpKindLast ||
        m->dtype >= SYNCD_DTYPE_COUNT || m->op >= SYNCD_REDUCE_OP_COUNT || m->gpu > 1 ||
        m->compression >= SYNCD_COMPRESSION_COUNT || m->compression_ppm > 1'000'000 || m->absent > 1 ||
        (m->absent == 1 && m->kind != uint32_t(abi::OpKind::kJoin)))
      return false;
    m->shape.resize(dims);
    for (auto& d : m->shape)
      if (!Get(&d)) return false;
    if (!Ints(&m->rows, kMaxRanks) || !Ints(&m->splits, kMaxRanks * kMaxRanks)) return false;
    // Splits come as one row of the matrix per rank (or, for a process set change, its ranks).
    return m->rows.empty() || m->splits.size() % m->rows.size() == 0;
  }
  bool Ints(std::vector<int64_t>* v, uint64_t most) {
    uint32_t n;
    if (!Get(&n) || n > most || pos_ + uint64_t(n) * sizeof(int64_t) > s_.size()) return false;
    v->resize(n);
    if (n > 0) memcpy(v->data(), s_.data() + pos_, uint64_t(n) * sizeof(int64_t));  // an empty vector's data() may be null
    pos_ += uint64_t(n) * sizeof(int64_t);
    return true;
  }
  static constexpr uint64_t kMaxRanks = 1 << 16;
  bool done() const { return pos_ == s_.size(); }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

TensorMeta TensorMeta::Of(const ReadyTensor& t) {
  TensorMeta m;
  Fill(t, &m);
  return m;
}

void TensorMeta::Fill(const ReadyTensor& t, TensorMeta* out) {
  const Request& r = t.first();
  TensorMeta& m = *out;
  m.kind = uint32_t(r.kind);
  m.dtype = r.dtype;
  m.op = r.op;
  m.gpu = r.gpu ? 1 : 0;
  m.arg = AgreedArg(r);
  m.prescale = r.prescale;
  m.postscale = r.postscale;
  m.compression = r.compression;
  m.compression_ppm = r.compression_ppm;
  m.absent = r.kind == abi::OpKind::kJoin &&
             std::all_of(t.requests.begin(), t.requests.end(), [](const Request& q) { return q.absent; });
  m.shape.assign(r.shape.begin(), r.shape.end());
  if (const Collective* kind = FindCollective(r.kind); kind != nullptr && kind->shapes_vary()) {
    RankRowsInto(t, &m.rows);  // the meta's own vectors, their room reused
    RankSplitsInto(t, &m.splits);
  } else {
    m.rows.clear();
    if (abi::IsSetChange(r.kind)) m.splits = r.splits;  // the set's ranks
    else m.splits.clear();
  }
}

// A kind's own number (Collective::AgreedArg); a set change, which is no kind, agrees on the set
// it removes.
int32_t AgreedArg(const Request& r) {
  if (r.kind == abi::OpKind::kRemoveProcessSet) return r.removed_set;
  const Collective* kind = FindCollective(r.kind);
  return kind != nullptr ? kind->AgreedArg(r) : r.root;
}

void SetAgreedArg(Request* r, int32_t arg) {
  if (r->kind == abi::OpKind::kRemoveProcessSet) {
    r->removed_set = arg;
  } else if (const Collective* kind = FindCollective(r->kind); kind != nullptr) {
    kind->SetAgreedArg(r, arg);
  } else {
    r->root = arg;
  }
}

Request RequestOf(const TensorMeta& meta, const std::string& name, uint32_t rank, size_t index) {
  Request r;
  r.name = name;
  r.rank = rank;
  r.kind = abi::OpKind(meta.kind);
  r.dtype = syncd_dtype(meta.dtype);
  r.op = syncd_reduce_op(meta.op);
  r.gpu = meta.gpu != 0;
  SetAgreedArg(&r, meta.arg);
  r.prescale = meta.prescale;
  r.postscale = meta.postscale;
  r.compression = uint8_t(meta.compression);
  r.compression_ppm = meta.compression_ppm;
  r.shape.assign(meta.shape.begin(), meta.shape.end());
  if (index < meta.rows.size()) {
    if (!r.shape.empty()) r.shape[0] = meta.rows[index];
    const size_t per = meta.splits.size() / meta.rows.size();
    r.splits.assign(meta.splits.begin() + index * per, meta.splits.begin() + (index + 1) * per);
  } else if (meta.rows.empty()) {
    r.splits = meta.splits;
  }
  return r;
}

std::string EncodeRequests(const std::vector<NameRequest>& v) {
  Writer w;
  w.Put<uint32_t>(kWireVersion);
  w.Put<uint32_t>(uint32_t(v.size()));
  for (const auto& r : v) {
    w.Str(r.name);
    w.Meta(r.meta);
    w.Str(r.error);
    w.Put(r.waited_ns);
  }
  return w.Take();
}

StatusOr<std::vector<NameRequest>> DecodeRequests(const std::string& bytes) {
  Reader rd(bytes);
  uint32_t version, n;
  std::vector<NameRequest> v;
  if (!rd.Get(&version)) return ProtocolError("negotiation: truncated request list");
  if (version != kWireVersion) return ProtocolError(WrongWireVersion("negotiation request list", version));
  if (!rd.Get(&n)) return ProtocolError("negotiation: truncated request list");
  for (uint32_t i = 0; i < n; ++i) {
    NameRequest r;
    if (!rd.Str(&r.name) || !rd.Meta(&r.meta) || !rd.Str(&r.error) || !rd.Get(&r.waited_ns))
      return ProtocolError("negotiation: malformed request list");
    v.push_back(std::move(r));
  }
  if (!rd.done()) return ProtocolError("negotiation: trailing bytes in request list");
  return v;
}

std::string EncodeResponses(const std::vector<NameResponse>& v) {
  Writer w;
  w.Put<uint32_t>(kWireVersion);
  w.Put<uint32_t>(uint32_t(v.size()));
  for (const auto& r : v) {
    w.Str(r.name);
    w.Put(r.status);
    w.Str(r.message);
    w.Put(r.cache_bit);
    w.Meta(r.meta);
  }
  return w.Take();
}

StatusOr<std::vector<NameResponse>> DecodeResponses(const std::string& bytes) {
  Reader rd(bytes);
  uint32_t version, n;
  std::vector<NameResponse> v;
  if (!rd.Get(&version)) return ProtocolError("negotiation: truncated response list");
  if (version != kWireVersion) return ProtocolError(WrongWireVersion("negotiation response list", version));
  if (!rd.Get(&n)) return ProtocolError("negotiation: truncated response list");
  for (uint32_t i = 0; i < n; ++i) {
    NameResponse r;
    if (!rd.Str(&r.name) || !rd.Get(&r.status) || !rd.Str(&r.message) || !rd.Get(&r.cache_bit) || !rd.Meta(&r.meta))
      return ProtocolError("negotiation: malformed response list");
    if (r.status < SYNCD_OK || r.status > SYNCD_ERR_STALLED || r.status == SYNCD_IN_PROGRESS || r.cache_bit < -1)
      return ProtocolError("negotiation: response for '" + r.name + "' has status " + std::to_string(r.status) +
                           " and cache bit " + std::to_string(r.cache_bit));
    v.push_back(std::move(r));
  }
  if (!rd.done()) return ProtocolError("negotiation: trailing bytes in response list");
  return v;
}

}  // namespace syncd
