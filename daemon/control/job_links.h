// A job's links to the other nodes' daemons: the UCX transport among its nodes, made by every
// node's daemon joining the rendezvous the job's first node serves and connecting to all the
// others, and what the rendezvous handed out with it (the GPUs of every node, the NCCL id, the
// place of a daemon restarted under the running job). The daemon's own job (--nodes, main.cc)
// makes them before its engine starts; a node service makes them for a registered job of several
// nodes when it is registered on every node (control_service.cc), and the engine takes them over.
//
// Threads: made on the calling thread (the main thread, a control call); the transport then
// belongs to the engine thread.
#ifndef SYNCD_DAEMON_CONTROL_JOB_LINKS_H_
#define SYNCD_DAEMON_CONTROL_JOB_LINKS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/base/config.h"
#include "daemon/base/status.h"
#include "daemon/control/rendezvous.h"
#include "daemon/engine/commands.h"
#include "daemon/exec/gpu_executor.h"
#include "daemon/transport/ucx/ucx_transport.h"

namespace syncd {

class Engine;

// Which job's links, among which nodes, and how to reach them.
struct LinkSpec {
  uint64_t job = 0;  // a node service's job (0: the daemon's own); each join proves it
  uint32_t nodes = 1, node_rank = 0;
  uint32_t local_size = 0;    // ranks per node (0: as the ranks say)
  std::string rendezvous;     // host:port, served by node 0
  std::string token;          // proves the job at the rendezvous (never sent: JoinProof)
  uint32_t join_timeout_s = 60;
  UcxOptions ucx;
};
// The daemon's own job: its --nodes, --node-rank, --rendezvous, token and loss policy.
LinkSpec LinkSpecOf(const Config& config);

struct JobLinks {
  std::unique_ptr<UcxTransport> transport;
  std::unique_ptr<GpuExecutor> gpu;     // GPUs of the daemon's own job (main.cc probes them)
  std::string no_gpu = "started with --gpus none";
  std::string nccl_id;                  // node 0 makes it; the rendezvous hands it out
  std::vector<uint32_t> gpus_per_node;  // from the rendezvous (this node's alone on one node)
  std::unique_ptr<RendezvousService> rendezvous;  // node 0 of a many-node job
  std::unique_ptr<grpc::Server> rendezvous_server;
  RejoinAnswer rejoin;  // restarted under a running job (rejoin.job != 0): where it stands

  ~JobLinks();
};

// Node 0: a daemon restarted under job `job` (0: the daemon's own; else a node service's job on
// links of its own) joins again (RendezvousService::set_rejoin). The engine takes its node back;
// the old daemon may not be known lost here yet (a restart quicker than the detection): it is
// asked again for up to 10 s.
RendezvousService::RejoinFn RejoinHook(Engine* engine, uint64_t job);

// Many nodes: this daemon joins the job's rendezvous (node 0 serves it first) with its UCX
// address and connects to every other node. Fails naming the rendezvous, the node or the timeout.
Status JoinPeers(const LinkSpec& spec, JobLinks* links);

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_JOB_LINKS_H_
