// Whether every rank's request of one name agrees, for every kind: the checks common to all
// (a failure notice, the kind, memory, dtype, TOPO plan), then the kind's own
// (Collective::Disagreement: shape rules, root, reduce op, ...). Used within a node (the tensor table) and across nodes (the
// coordinator), so a mismatch reads the same wherever it was found.
#ifndef SYNCD_DAEMON_COLLECTIVES_AGREEMENT_H_
#define SYNCD_DAEMON_COLLECTIVES_AGREEMENT_H_

#include <functional>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/core/request.h"

namespace syncd {

// OK, or SYNCD_ERR_MISMATCH naming the tensor, the property and which ranks had which value.
Status CheckAgreement(const std::vector<Request>& requests);

// "tensor 'w': mismatched shape across ranks: [4,4] on ranks 0,1; [4,5] on rank 2", or "" when
// `describe` gives every request the same value. For a kind's own checks.
std::string Disagreement(const std::vector<Request>& requests, const char* what,
                         const std::function<std::string(const Request&)>& describe);

// As Disagreement, but `key` (cheap, comparable with ==; may return a reference) decides whether
// the requests differ: `describe` builds its strings only then. Every collective passes these
// checks, so the common case must not allocate.
template <typename Key>
std::string DisagreementBy(const std::vector<Request>& requests, const char* what, Key key,
                           const std::function<std::string(const Request&)>& describe) {
  for (const Request& r : requests)
    if (!(key(r) == key(requests.front()))) return Disagreement(requests, what, describe);
  return "";
}

// Every request has the same shape ("" or the message): what most kinds require.
std::string SameShape(const std::vector<Request>& requests);
// The same shape, reduce op and scale factors (allreduce, reducescatter).
std::string SameReduction(const std::vector<Request>& requests);
// The same number of dimensions and the same extents after the first (allgather, alltoall).
std::string SameShapeAfterFirst(const std::vector<Request>& requests);
// The same root (kinds with one).
std::string SameRoot(const std::vector<Request>& requests);

}  // namespace syncd

#endif  // SYNCD_DAEMON_COLLECTIVES_AGREEMENT_H_
