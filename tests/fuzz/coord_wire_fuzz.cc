// What one daemon sends another (coord/wire.h): the coordinator's request lists, its responses,
// control messages, and a TOPO plan sent to a node without it (plan/plan_codec.h). The first byte
// picks the decoder. A list that decodes re-encodes to the
// same bytes, and what the coordinator then does with its metas (the agreement check) holds. A
// health report (job_health.h) is read as node 1's by node 0 of a three-node job.
#include <string>

#include "daemon/collectives/agreement.h"
#include "daemon/coord/job_health.h"
#include "daemon/coord/wire.h"
#include "daemon/plan/plan_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto reqs = syncd::DecodeRequests(bytes);
      if (!reqs.ok()) return 0;
      if (syncd::EncodeRequests(*reqs) != bytes) __builtin_trap();
      std::vector<syncd::Request> ranks;
      for (const syncd::NameRequest& r : *reqs) ranks.push_back(syncd::RequestOf(r.meta, r.name, uint32_t(ranks.size()), 0));
      if (!ranks.empty()) (void)syncd::CheckAgreement(ranks);
      break;
    }
    case 1: {
      auto resps = syncd::DecodeResponses(bytes);
      if (resps.ok() && syncd::EncodeResponses(*resps) != bytes) __builtin_trap();
      break;
    }
    case 2: {
      auto m = syncd::DecodeControl(bytes.data(), bytes.size());
      if (m.ok()) {
        char out[syncd::kControlMessageBytes];
        syncd::EncodeControl(*m, out);
        auto again = syncd::DecodeControl(out, sizeof(out));
        if (!again.ok() || again->kind != m->kind || again->job != m->job || again->text != m->text) __builtin_trap();
        if (m->kind == syncd::ControlMessage::Kind::kHealth) {
          syncd::JobHealth viewer(3, 0, 0);
          std::vector<syncd::HealthBundle> out;
          (void)viewer.Receive(1, (m->cycle & 1) != 0, m->text, 1, {false, false, false}, &out);
          std::vector<syncd::NodeHealth> nodes = viewer.Peers(2, {false, false, false});
          syncd::CompareNodeWaits(&nodes);
        }
      }
      break;
    }
    case 3: {
      auto plan = syncd::DecodePlan(bytes.data(), bytes.size());
      if (plan.ok() && (syncd::EncodePlan(*plan) != bytes || syncd::PlanHash(*plan) != plan->hash)) __builtin_trap();
      break;
    }
  }
  return 0;
}
