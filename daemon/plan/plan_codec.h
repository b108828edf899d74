// A TOPO plan as daemons send it to each other: when the global set is made afresh (a membership
// change, coord/job_join.h), a node that holds the job's registered plan sends it, as planned, to
// a node that does not (a restarted daemon, a node taken back). The receiver decodes it and checks
// that its PlanHash is the one the sender announced. Pure; DecodePlan trusts nothing in the bytes.
#ifndef SYNCD_DAEMON_PLAN_PLAN_CODEC_H_
#define SYNCD_DAEMON_PLAN_PLAN_CODEC_H_

#include <cstddef>
#include <string>

#include "daemon/base/status.h"
#include "daemon/plan/topo.h"

namespace syncd {

std::string EncodePlan(const TopoPlan& plan);
// Fails with SYNCD_ERR_PROTOCOL naming what is wrong (truncation, bad magic or version, a tensor
// with an unknown dtype, reduce op, memory kind or compression, an empty, long or repeated name,
// no elements, group boundaries out of order). The hash is computed afresh (PlanHash).
StatusOr<TopoPlan> DecodePlan(const char* data, size_t bytes);

}  // namespace syncd

#endif  // SYNCD_DAEMON_PLAN_PLAN_CODEC_H_
