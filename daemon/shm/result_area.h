// The daemon's side of one client's result area (abi::ResultHeader): blocks for results whose
// size only the daemon knows (allgather, alltoall). The daemon allocates a block once the ranks
// agreed, writes the result and points the completion at it; the client copies the result out
// and sets the block's `released` flag, and the next allocation reclaims it. A block whose
// request failed never reaches the client: the daemon frees it at completion.
//
// Trust: the client can only write `released` (or scribble over its own blocks); the daemon's
// allocation table is its own, so nothing the client does can make it hand out a block twice or
// write outside the area.
//
// Engine thread only. Requests hold it (with the mapping) so a block can be filled and freed after
// the client is gone.
#ifndef SYNCD_DAEMON_SHM_RESULT_AREA_H_
#define SYNCD_DAEMON_SHM_RESULT_AREA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "proto/arena_allocator.h"
#include "proto/shm_abi.h"

namespace syncd {

class ResultArea {
 public:
  // [offset, offset + bytes) of the segment at `segment_base`, kept mapped by `memory`.
  ResultArea(std::shared_ptr<const void> memory, char* segment_base, uint64_t offset, uint64_t bytes);

  struct Block {
    char* data;           // data_bytes of result
    uint64_t offset;      // the ResultHeader, from the start of the segment (for the completion)
  };
  // A block for `data_bytes` of result with `rows` (one per rank of the set) in its header, or
  // nullopt when the area is full even after reclaiming what the client released.
  std::optional<Block> Allocate(uint64_t data_bytes, const std::vector<int64_t>& rows);
  // A block whose result never reached the client.
  void Free(uint64_t offset);

  uint64_t capacity() const { return alloc_.capacity(); }
  uint64_t bytes_in_use() const { return alloc_.bytes_in_use(); }
  size_t blocks() const { return live_.size(); }

 private:
  // Frees every block the client has released; returns how many.
  size_t Reclaim();

  std::shared_ptr<const void> memory_;
  char* base_;       // start of the area
  uint64_t offset_;  // of the area in the segment
  ArenaAllocator alloc_;
  // Blocks not freed yet, by offset in the area, ascending (a few at a time: a sorted vector
  // allocates nothing once it has held as many).
  std::vector<uint64_t> live_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_SHM_RESULT_AREA_H_
