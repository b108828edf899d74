// PowerSGD on the inter-node hop (Vogels, Karimireddy and Jaggi, 2019), with error feedback, as
// feedback.h describes the hop: each node's exact local sum plus its residual, M (a member tensor
// as a matrix of its first dimension's rows by the rest), travels as two thin factors:
//   1. P_i = M_i Q with Q the tensor's factor from its last step (warm start; the first time a
//      pseudo-random one, the same on every node); the nodes' P_i summed (one allreduce);
//   2. P orthonormalised (Gram-Schmidt, on every node alike: P is the same everywhere);
//   3. Q_i = M_i^T P; the residual becomes M_i - P Q_i^T; the nodes' Q_i summed (one allreduce);
//   4. every node's result is P Q^T = sum over nodes of P Q_i^T, and Q is kept for the next step.
// So what every node applied plus what the nodes kept is the sum of their M_i, step after step.
// Tensors of one dimension, and matrices whose factors would not be smaller than they are, cross
// as they are, in the first allreduce. The products run on the daemon's core with Eigen.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/base/hash.h"
#include "daemon/collectives/allreduce/feedback.h"
#include "daemon/core/residual_store.h"
#include "daemon/exec/host_executor.h"
#include "daemon/transport/host_collectives.h"

namespace syncd {
namespace {

template <typename T>
using Matrix = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// The residual store's key of a tensor's warm-start factor Q (names hold no NUL).
std::string FactorKey(const std::string& name) { return name + std::string(1, '\0') + "powersgd-q"; }

// A member as PowerSGD sees it: rows x cols, and whether it travels as factors of `rank` columns.
struct MatrixShape {
  size_t rows = 0, cols = 0;
  bool factored = false;
};

MatrixShape ShapeOf(const Shape& shape, size_t count, uint32_t rank) {
  MatrixShape s;
  if (shape.size() < 2 || shape[0] <= 0) return MatrixShape{count, 1, false};
  s.rows = size_t(shape[0]);
  s.cols = count / s.rows;
  s.factored = (s.rows + s.cols) * rank < s.rows * s.cols;
  return s;
}

uint32_t RankOf(const Request& r) { return r.compression_ppm == 0 ? 1u : r.compression_ppm; }

// One member's place in the exchanges and where its matrix is.
template <typename T>
struct Member {
  MatrixShape shape;
  size_t begin = 0, end = 0;  // in the group's concatenation
  T* p = nullptr;             // its P (factored) or its values (not), in the first exchange
  T* q = nullptr;             // its Q_i, in the second
  T* m = nullptr;             // its node sum plus residual (factored)
  ResidualStore::Pin residual, factor;
};

// Columns of `p` (rows x rank) made orthonormal, in order; a column that vanishes becomes zeros.
template <typename T>
void Orthonormalise(T* p, size_t rows, uint32_t rank) {
  Matrix<T> P(p, Eigen::Index(rows), Eigen::Index(rank));
  for (Eigen::Index j = 0; j < P.cols(); ++j) {
    for (Eigen::Index k = 0; k < j; ++k) P.col(j) -= P.col(k).dot(P.col(j)) * P.col(k);
    const T norm = P.col(j).norm();
    if (norm > T(1e-30)) P.col(j) /= norm;
    else P.col(j).setZero();
  }
}

// The first factor of a tensor without one: pseudo-random in [-1, 1), from its name, so every
// node starts from the same.
template <typename T>
void FirstFactor(const std::string& name, T* q, size_t n) {
  uint64_t x = Hash64(name) | 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    q[i] = T(double(x >> 11) / double(uint64_t{1} << 52) - 1.0);
  }
}

// The group's members and the sizes of what it exchanges: the first allreduce (every member's P,
// or its values), the second (every factored member's Q_i), the node sums made outside the
// residuals, and the result slot (the largest factored member).
template <typename T>
struct Layout {
  std::vector<Member<T>> members;
  size_t first = 0, second = 0, own_m = 0, result = 0;
};

template <typename T>
Layout<T> LayOut(const CollectiveGroup& group, const AcrossNodes& run, uint32_t rank) {
  const Request& f = group.front()->first();
  Layout<T> l;
  l.members.resize(group.size());
  size_t at = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    const Request& r = group[i]->first();
    Member<T>& m = l.members[i];
    m.begin = at;
    m.end = at += r.bytes / sizeof(T);
    m.shape = ShapeOf(r.shape, m.end - m.begin, rank);
    if (!m.shape.factored) {
      l.first += m.end - m.begin;
      continue;
    }
    l.first += m.shape.rows * rank;
    l.second += m.shape.cols * rank;
    l.result = std::max(l.result, m.end - m.begin);
    if (run.residuals != nullptr) {
      m.residual = run.residuals->Acquire(run.set, r.name, r.bytes);
      m.factor = run.residuals->Acquire(run.set, FactorKey(r.name), m.shape.cols * rank * sizeof(T));
    }
    // In the residual itself where it can be (feedback.cc's NodeSumAt), else a slot of its own.
    if (!m.residual || f.prescale != 1.0) l.own_m += m.end - m.begin;
  }
  return l;
}

// A factored member's node sum plus its residual, M (in the residual, or at *next_m), and
// P = M Q from its warm start (last step's Q, kept by every node alike; else the first).
template <typename T>
void SumAndProject(const CollectiveGroup& group, const AcrossNodes& run, uint32_t rank, const std::string& name,
                   Member<T>& m, T** next_m) {
  const size_t n = m.end - m.begin;
  T* const residual = m.residual ? reinterpret_cast<T*>(m.residual.data()) : nullptr;
  if (residual != nullptr && group.front()->first().prescale == 1.0) {
    m.m = residual;
    run.host->ReduceRange(group, m.begin, m.end, reinterpret_cast<char*>(m.m), /*accumulate=*/true);
  } else {
    m.m = *next_m;
    *next_m += n;
    run.host->ReduceRange(group, m.begin, m.end, reinterpret_cast<char*>(m.m));
    if (residual != nullptr)
      for (size_t j = 0; j < n; ++j) m.m[j] += residual[j];
  }
  T* const warm = m.factor ? reinterpret_cast<T*>(m.factor.data()) : m.q;
  const size_t qn = m.shape.cols * rank;
  bool zero = true;
  for (size_t j = 0; j < qn && zero; ++j) zero = warm[j] == T(0);
  if (zero) FirstFactor(name, warm, qn);
  const Eigen::Index rows = Eigen::Index(m.shape.rows), cols = Eigen::Index(m.shape.cols), r = Eigen::Index(rank);
  Matrix<T>(m.p, rows, r).noalias() = Matrix<T>(m.m, rows, cols) * Matrix<T>(warm, cols, r);
}

// After the nodes' P are summed: P orthonormal, Q_i = M_i^T P, the residual M_i - P Q_i^T.
template <typename T>
void FactorAndKeepTheRest(Member<T>& m, uint32_t rank) {
  const Eigen::Index rows = Eigen::Index(m.shape.rows), cols = Eigen::Index(m.shape.cols), r = Eigen::Index(rank);
  Orthonormalise(m.p, m.shape.rows, rank);
  Matrix<T> P(m.p, rows, r), Q(m.q, cols, r), M(m.m, rows, cols);
  Q.noalias() = M.transpose() * P;
  if (!m.residual) return;
  M.noalias() -= P * Q.transpose();
  if (m.m != reinterpret_cast<T*>(m.residual.data())) memcpy(m.residual.data(), m.m, (m.end - m.begin) * sizeof(T));
}

template <typename T>
CommTask Run(CollectiveGroup group, AcrossNodes run) {
  const Request& f = group.front()->first();
  const uint32_t rank = RankOf(f);
  Layout<T> l = LayOut<T>(group, run, rank);
  const HostBuffer::Block buffer = run.buffer->Reserve((l.first + l.second + l.own_m + l.result) * sizeof(T));
  T* const first = reinterpret_cast<T*>(buffer->data());
  T* const second = first + l.first;
  T* next_m = second + l.second;
  T* const slot = next_m + l.own_m;
  // The node's sums (as they are, or P_i = M_i Q), laid end to end for the first exchange.
  T* p = first;
  T* q = second;
  for (size_t i = 0; i < group.size(); ++i) {
    Member<T>& m = l.members[i];
    m.p = p;
    if (!m.shape.factored) {
      run.host->ReduceRange(group, m.begin, m.end, reinterpret_cast<char*>(p));
      p += m.end - m.begin;
      continue;
    }
    m.q = q;
    q += m.shape.cols * rank;
    p += m.shape.rows * rank;
    SumAndProject(group, run, rank, group[i]->first().name, m, &next_m);
  }
  const std::vector<int64_t>* absent = f.op == SYNCD_AVERAGE ? run.absent.get() : nullptr;
  const absl::Span<const int64_t> absent_span =
      absent != nullptr ? absl::Span<const int64_t>(*absent) : absl::Span<const int64_t>();
  CommTask sums = Allreduce(run.transport, run.tag, first, buffer, l.first, f.dtype, SYNCD_SUM);
  Status st = co_await Await(&sums);
  if (!st.ok()) co_return st;
  for (Member<T>& m : l.members) {
    if (m.shape.factored) FactorAndKeepTheRest(m, rank);
    else run.host->ScatterRange(group, m.begin, m.end, reinterpret_cast<char*>(m.p), absent_span);  // done
  }
  if (l.second > 0) {
    CommTask factors = Allreduce(run.transport, run.tag | 1, second, buffer, l.second, f.dtype, SYNCD_SUM);
    st = co_await Await(&factors);
    if (!st.ok()) co_return st;
  }
  // Every node's result, P Q^T; Q kept for the next step.
  for (Member<T>& m : l.members) {
    if (!m.shape.factored) continue;
    const Eigen::Index rows = Eigen::Index(m.shape.rows), cols = Eigen::Index(m.shape.cols), r = Eigen::Index(rank);
    Matrix<T>(slot, rows, cols).noalias() = Matrix<T>(m.p, rows, r) * Matrix<T>(m.q, cols, r).transpose();
    run.host->ScatterRange(group, m.begin, m.end, reinterpret_cast<char*>(slot), absent_span);
    if (m.factor) memcpy(m.factor.data(), m.q, m.shape.cols * rank * sizeof(T));
  }
  co_return Status::Ok();
}

}  // namespace

CommTask RunAcrossWithPowerSgd(CollectiveGroup group, AcrossNodes run) {
  if (group.front()->first().dtype == SYNCD_FLOAT64) return Run<double>(std::move(group), std::move(run));
  return Run<float>(std::move(group), std::move(run));
}

uint64_t PowerSgdWireBytes(uint32_t rank, const Shape& shape, uint64_t bytes, size_t element_bytes) {
  if (rank == 0) rank = 1;
  const MatrixShape s = ShapeOf(shape, bytes / element_bytes, rank);
  return s.factored ? (s.rows + s.cols) * rank * element_bytes : bytes;
}

}  // namespace syncd
