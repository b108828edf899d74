// A job's membership (membership.h). Engine thread only.
#include "daemon/engine/membership.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "daemon/base/hex.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {

constexpr uint64_t kSeeLostNs = 10'000'000'000ull;  // for a restarted node's old daemon to be seen lost here

}  // namespace

double UnixSeconds() {
  return double(std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count()) / 1e3;
}

void Membership::Change(uint32_t number, std::string why, bool routine) {
  number_ = number;
  why_ = std::move(why);
  spdlog::log(routine ? spdlog::level::info : spdlog::level::warn, "{}", why_);
  changes_.push_back({number_, UnixSeconds(), why_});
}

int32_t Membership::SetNode(uint32_t node) const {
  if (global_nodes_.empty()) return int32_t(node);
  const auto at = std::find(global_nodes_.begin(), global_nodes_.end(), node);
  return at == global_nodes_.end() ? -1 : int32_t(at - global_nodes_.begin());
}

std::vector<uint32_t> Membership::SeeLostNodes(Transport* t) {
  if (nodes_lost_.size() != t->size()) nodes_lost_.assign(t->size(), false);
  std::vector<uint32_t> newly;
  for (uint32_t p = 0; p < t->size(); ++p)
    if (p != t->rank() && !nodes_lost_[p] && t->PeerLost(p)) {
      nodes_lost_[p] = true;
      newly.push_back(p);
    }
  return newly;
}

std::vector<uint32_t> Membership::LostNodes() const {
  std::vector<uint32_t> lost;
  for (uint32_t node = 0; node < nodes_lost_.size(); ++node)
    if (nodes_lost_[node]) lost.push_back(node);
  return lost;
}

void Membership::Resume(uint32_t nodes, const std::vector<uint32_t>& lost, uint32_t number, std::string why) {
  nodes_lost_.assign(nodes, false);
  for (uint32_t n : lost)
    if (n < nodes_lost_.size()) nodes_lost_[n] = true;
  Change(number, std::move(why));
}

void Membership::Asking(uint32_t node, bool joins) {
  back_asked_.push_back(node);
  if (joining_.size() <= node) joining_.resize(node + 1, false);
  joining_[node] = joins;
}

std::vector<uint32_t> Membership::TakeAsking() {
  std::vector<uint32_t> asking = std::exchange(back_asked_, {});
  std::sort(asking.begin(), asking.end());
  asking.erase(std::unique(asking.begin(), asking.end()), asking.end());
  return asking;
}

bool Membership::Receive(uint32_t node, const ControlMessage& m) {
  switch (m.kind) {
    case ControlMessage::Kind::kNodeBack:
      Asking(node, m.text == kJoinsWord);
      return true;
    case ControlMessage::Kind::kNodeJoin: {
      char* word = nullptr;
      const uint32_t joiner = uint32_t(strtoul(m.text.c_str(), &word, 10));
      Answer({joiner, uint32_t(m.cycle), uint32_t(m.code), std::string(word) == " " + std::string(kJoinsWord)});
      return true;
    }
    case ControlMessage::Kind::kNodeRestarted:
    case ControlMessage::Kind::kNodeAddress:
      ReceiveRestart(m);
      return true;
    default:
      return false;
  }
}

void Membership::ReceiveRestart(const ControlMessage& m) {
  if (m.kind == ControlMessage::Kind::kNodeRestarted) {
    RestartedNode n;
    char host[kControlTextBytes + 1] = {};
    unsigned chunks = 0;
    if (sscanf(m.text.c_str(), "%u %d %u %360s", &n.node, &n.pid, &chunks, host) < 3) {
      spdlog::error("a restarted daemon's notice could not be read: '{}'", m.text);
      return;
    }
    n.host = host;
    n.number = uint32_t(m.cycle);
    n.slot = uint32_t(m.code);
    n.chunks = chunks;
    n.deadline_ns = abi::MonotonicNs() + kSeeLostNs;
    restarts_.push_back(std::move(n));
    return;
  }
  for (RestartedNode& n : restarts_)  // kNodeAddress: the next piece of a restarted node's address
    if (n.node == m.cycle && n.got < n.chunks) {
      if (uint32_t(m.code) != n.got) spdlog::error("node {}'s new address: piece {} came as {}", n.node, n.got, m.code);
      StatusOr<std::string> piece =
          Unhex(m.text, "node 0 sent a piece of node " + std::to_string(n.node) + "'s address");
      if (!piece.ok()) spdlog::error("{}", piece.status().message());
      else n.address += *piece;
      ++n.got;
      return;
    }
}

}  // namespace syncd
