// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021;
// Horovod's op=Adasum): an allreduce whose pairwise rule adds two gradients a and b as
//   (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// (a coefficient stays 1 for a zero vector), so that orthogonal gradients add and parallel ones
// average, at any scale (Horovod keeps a coefficient 1 below a squared norm of 1e-8: see adasum.cc). Over n ranks (a power of two, as Horovod requires) the rule combines ranks r and
// r + 2^k at level k, lower ranks on the left, up a binary tree: the result is the same for a job
// whatever its nodes. Each member tensor of a fused group has its own dot products. Float dtypes
// only; computed in float (float64 for float64 tensors), dot products in double, scale factors as
// allreduce applies them (prescale on each rank's tensor, postscale on the result).
//
// Where it runs: the levels within a node on the daemon's cores, over the ranks' tensors in shared
// memory; across nodes (a power of two of them, each with the same power of two of the set's ranks)
// by recursive vector halving with the dot products summed over the nodes of each level's subtree,
// then distance doubling to put the pieces back together (Horovod's VHDD). Sets laid out otherwise
// gather every rank's tensor on every node and run the tree there.
#ifndef SYNCD_DAEMON_COLLECTIVES_ALLREDUCE_ADASUM_H_
#define SYNCD_DAEMON_COLLECTIVES_ALLREDUCE_ADASUM_H_

#include "daemon/collectives/collective.h"

namespace syncd {

// One node: every local rank's tensor ends holding the result.
void AdasumLocal(const CollectiveGroup& group);
// Many nodes, host memory.
CommTask RunAdasumAcross(CollectiveGroup group, AcrossNodes run);

}  // namespace syncd

#endif  // SYNCD_DAEMON_COLLECTIVES_ALLREDUCE_ADASUM_H_
