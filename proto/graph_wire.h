// How a client hands its TOPO graph to the daemon: a byte string in the client's arena, named by a
// kRegisterGraph ring entry. Little-endian, fixed-size fields, no padding:
//
//   header   u32 magic, u32 version, u32 ops, u32 edges, u32 fetches, u32 reserved (0)
//   op       u8 collective (0|1), u8 dtype, u8 reduce op, u8 memory (0 host, 1 GPU),
//            u8 compression (syncd_compression), u32 compression ppm (top-k's and random-k's ratio
//            in parts per million or PowerSGD's rank; 0: the daemon's), u64 count,
//            u16 name bytes, u16 tensor bytes, name, tensor           (repeated `ops` times)
//   edge     u32 producer, u32 consumer                               (repeated `edges` times)
//   fetch    u32 op index                                             (repeated `fetches` times)
//
// Version 2 added the memory byte (reserved, 0, in version 1), version 3 the compression byte,
// version 4 the compression ppm; the daemon reads only its own.
//
// The encoder is here (header-only, standard library only) so the thin client needs nothing else;
// the daemon's decoder (daemon/plan/graph_codec.h) trusts none of it.
#ifndef SYNCD_PROTO_GRAPH_WIRE_H_
#define SYNCD_PROTO_GRAPH_WIRE_H_

#include <cstdint>
#include <cstring>
#include <string>

namespace syncd::abi {

inline constexpr uint32_t kGraphMagic = 0x47504f54;  // "TOPG"
inline constexpr uint32_t kGraphVersion = 4;
inline constexpr size_t kGraphHeaderBytes = 24;
inline constexpr size_t kGraphOpFixedBytes = 21;
inline constexpr uint32_t kGraphMaxOps = 1u << 24;
inline constexpr uint32_t kGraphMaxEdges = 1u << 26;

class GraphWriter {
 public:
  GraphWriter(uint32_t ops, uint32_t edges, uint32_t fetches) {
    Put32(kGraphMagic);
    Put32(kGraphVersion);
    Put32(ops);
    Put32(edges);
    Put32(fetches);
    Put32(0);
  }
  void Op(bool collective, uint32_t dtype, uint32_t op, uint64_t count, const std::string& name,
          const std::string& tensor, uint32_t memory = 0, uint32_t compression = 0, uint32_t compression_ppm = 0) {
    out_.push_back(char(collective ? 1 : 0));
    out_.push_back(char(uint8_t(dtype)));
    out_.push_back(char(uint8_t(op)));
    out_.push_back(char(uint8_t(memory)));
    out_.push_back(char(uint8_t(compression)));
    Put32(compression_ppm);
    Put64(count);
    Put16(uint16_t(name.size()));
    Put16(uint16_t(tensor.size()));
    out_ += name;
    out_ += tensor;
  }
  void Edge(uint32_t producer, uint32_t consumer) {
    Put32(producer);
    Put32(consumer);
  }
  void Fetch(uint32_t op) { Put32(op); }
  const std::string& bytes() const { return out_; }

 private:
  void Put16(uint16_t v) { Append(&v, 2); }
  void Put32(uint32_t v) { Append(&v, 4); }
  void Put64(uint64_t v) { Append(&v, 8); }
  void Append(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }  // little-endian hosts
  std::string out_;
};

}  // namespace syncd::abi

#endif  // SYNCD_PROTO_GRAPH_WIRE_H_
